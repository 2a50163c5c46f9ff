// The usage page's two charts (tokens, requests), drawn by the vendored Chart.js from the data
// the page embeds as JSON (gateway/views/usage.py chart_data). The table under them has the
// same numbers, so the page says everything without JavaScript too.
(function () {
  const source = document.getElementById("usage-chart-data");
  if (!source || typeof Chart === "undefined") return;
  const data = JSON.parse(source.textContent);
  // One colour per group, distinct on white; past eight they repeat.
  const colours = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

  function draw(canvasId, field) {
    const canvas = document.getElementById(canvasId);
    if (!canvas) return;
    new Chart(canvas, {
      type: data.labels.length > 1 ? "line" : "bar",
      data: {
        labels: data.labels,
        datasets: data.series.map(function (line, index) {
          const colour = colours[index % colours.length];
          return { label: line.name, data: line[field], borderColor: colour, backgroundColor: colour };
        }),
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        scales: { y: { beginAtZero: true } },
      },
    });
  }

  draw("tokens-chart", "tokens");
  draw("requests-chart", "requests");
})();
