// Live updates are an addition: when the socket drops, say so and poll the same parts of the
// page until it is back (htmx's ws extension reconnects by itself and then resumes).
(function () {
  let polling = null;
  const PAUSED = "Live updates paused: reconnecting. The page refreshes its figures every 5 s meanwhile.";
  // A status region (polite, empty, taking no room) that is in the page before the note is put
  // into it, so screen readers announce the pause; a region inserted with its words often is not.
  function statusRegion() {
    let region = document.getElementById("live-status");
    if (!region) {
      region = document.createElement("div");
      region.id = "live-status";
      region.setAttribute("role", "status");
      document.querySelector("main").prepend(region);
    }
    return region;
  }
  function banner(show) {
    const region = statusRegion();
    if (!show) { region.replaceChildren(); return; }
    if (region.firstElementChild) return;
    const note = document.createElement("p");
    note.className = "callout notice";
    note.textContent = PAUSED;
    region.append(note);
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[ws-connect]") && document.querySelector("main")) statusRegion();
  });
  // Each live part names where to poll it from (its own small URL, or else this page).
  function pollParts() {
    for (const part of document.querySelectorAll("[data-live-part][id]")) {
      const from = part.dataset.pollUrl || window.location.href;
      htmx.ajax("GET", from, { select: "#" + part.id, target: "#" + part.id, swap: "outerHTML" });
    }
  }
  // The socket's element says whether it is open (data-live-open), so that a check (a test,
  // a person in the inspector) can tell that updates will arrive before making one happen.
  document.addEventListener("htmx:wsClose", function (event) {
    delete event.target.dataset.liveOpen;
    banner(true);
    if (!polling) polling = setInterval(pollParts, 5000);
  });
  document.addEventListener("htmx:wsOpen", function (event) {
    event.target.dataset.liveOpen = "true";
    banner(false);
    if (polling) { clearInterval(polling); polling = null; }
  });
  // A live log follows new lines unless the operator scrolled up to read.
  document.addEventListener("htmx:wsAfterMessage", function () {
    const lines = document.getElementById("log-lines");
    if (!lines) return;
    const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 200;
    const rows = lines.querySelectorAll("tr");
    // Keep the page light: only the newest few hundred lines stay in the page.
    for (let i = 0; i < rows.length - 400; i++) rows[i].remove();
    if (nearBottom) window.scrollTo(0, document.body.scrollHeight);
  });
})();

// Copy buttons (no inline handlers: the Content-Security-Policy allows scripts from files only).
document.addEventListener("click", function (event) {
  const button = event.target.closest("[data-copy-text], [data-copy-rows]");
  if (!button) return;
  let text;
  if (button.dataset.copyText) {
    text = document.querySelector(button.dataset.copyText).textContent;
  } else {
    const rows = document.querySelectorAll(button.dataset.copyRows);
    text = [...rows].map((row) => row.innerText.replaceAll("\t", " ")).join("\n");
  }
  navigator.clipboard.writeText(text);
});
