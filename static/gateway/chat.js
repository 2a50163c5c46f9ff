// The chat page with JavaScript: keeps the conversation, streams each reply from the console's
// /chat/send (session and CSRF, no API key), and shows its time to first token and speed.
// Without JavaScript the form posts to /chat/ and the page shows the whole reply instead.
(function () {
  "use strict";
  const section = document.getElementById("chat");
  const form = document.getElementById("chat-form");
  if (!section || !form || !window.fetch || !window.TextDecoder) return;
  const conversation = document.getElementById("conversation");
  const model = document.getElementById("chat-model");
  const input = document.getElementById("chat-message");
  const button = document.getElementById("chat-send");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  let history = [];

  model.addEventListener("change", function () {
    history = [];
    conversation.replaceChildren();
  });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    history.push({ role: "user", content: text });
    addTurn("turn-user", "You", text);
    input.value = "";
    send();
  });

  function addTurn(kind, who, text) {
    const turn = document.createElement("article");
    turn.className = "turn " + kind;
    const name = document.createElement("strong");
    name.textContent = who;
    const body = document.createElement("p");
    body.textContent = text;
    body.style.whiteSpace = "pre-wrap";
    const figures = document.createElement("small");
    figures.className = "muted reply-figures";
    turn.append(name, body, figures);
    conversation.append(turn);
    return { body: body, figures: figures };
  }

  async function send() {
    button.disabled = true;
    const reply = addTurn("turn-assistant", model.value, "");
    const timing = { sent: performance.now(), first: null, tokens: 0, usage: null };
    try {
      const response = await fetch(section.dataset.sendUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify({ model: model.value, messages: history }),
      });
      if (!response.ok) {
        const problem = await response.json().catch(() => ({}));
        throw new Error((problem.error && problem.error.message) || response.statusText);
      }
      await read(response.body.getReader(), reply, timing);
      history.push({ role: "assistant", content: reply.body.textContent });
      reply.figures.textContent = figures(timing);
    } catch (error) {
      history.pop();
      reply.body.textContent = "";
      reply.figures.textContent = error.message;
      reply.figures.setAttribute("role", "alert");
    } finally {
      button.disabled = false;
    }
  }

  async function read(reader, reply, timing) {
    const decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      pending += decoder.decode(value, { stream: true });
      const events = pending.split("\n\n");
      pending = events.pop();
      for (const event of events) take(event, reply, timing);
    }
  }

  function take(event, reply, timing) {
    const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
    if (!data || data === "[DONE]") return;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message);
    if (chunk.usage) timing.usage = chunk.usage.completion_tokens;
    const choice = chunk.choices && chunk.choices[0];
    const piece = choice && choice.delta && choice.delta.content;
    if (!piece) return;
    if (timing.first === null) timing.first = performance.now();
    timing.last = performance.now();
    timing.tokens += 1;
    reply.body.textContent += piece;
  }

  function figures(timing) {
    if (timing.first === null) return "No reply.";
    const ttft = (timing.first - timing.sent) / 1000;
    const tokens = timing.usage || timing.tokens;
    const seconds = (timing.last - timing.first) / 1000;
    // The first token starts the clock: the speed is of the tokens after it.
    const speed = seconds > 0 && tokens > 1 ? ((tokens - 1) / seconds).toFixed(1) + " tokens/s" : tokens + " tokens";
    return "First token after " + ttft.toFixed(2) + " s · " + speed;
  }
})();
