// The staff dashboard (the console's index): draws today's figures with Chart.js (vendored under
// static/vendor/chart.js/) and refreshes them every 30 seconds from the console's dashboard.json.
// Colours come from the theme's CSS variables and follow the light/dark toggle.
(function () {
  "use strict";
  var REFRESH_MS = 30000;

  function token(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function colours() {
    return { accent: token("--accent"), second: token("--ok"), text: token("--muted"), grid: token("--border") };
  }
  function axes(c) {
    return {
      x: { grid: { display: false }, ticks: { color: c.text, maxRotation: 0, autoSkip: true, autoSkipPadding: 14 } },
      y: { beginAtZero: true, grid: { color: c.grid }, border: { display: false },
        ticks: { color: c.text, precision: 0, callback: function (v) { return Number(v).toLocaleString(); } } },
    };
  }
  function pick(data, path) {
    return path.split(".").reduce(function (value, key) { return value == null ? value : value[key]; }, data);
  }

  function start() {
    var source = document.getElementById("dashboard-data");
    var script = document.getElementById("dashboard-script");
    if (!source || !script || typeof window.Chart === "undefined") return;
    var data = JSON.parse(source.textContent);
    var c = colours();
    var common = { responsive: true, maintainAspectRatio: false, animation: false };

    var lastHour = new window.Chart(document.getElementById("chart-last-hour"), {
      type: "line",
      data: { labels: data.last_hour.labels, datasets: [
        { label: "Questions", data: data.last_hour.questions, borderColor: c.accent, backgroundColor: c.accent,
          pointRadius: 0, tension: 0.3, borderWidth: 2 },
        { label: "Answers", data: data.last_hour.answers, borderColor: c.second, backgroundColor: c.second,
          pointRadius: 0, tension: 0.3, borderWidth: 2, borderDash: [5, 3] },
      ] },
      options: Object.assign({}, common, { interaction: { mode: "index", intersect: false },
        plugins: { legend: { labels: { color: c.text, boxWidth: 12 } } }, scales: axes(c) }),
    });
    var today = new window.Chart(document.getElementById("chart-today"), {
      type: "bar",
      data: { labels: data.today.labels, datasets: [
        { label: "Tokens", data: data.today.tokens, backgroundColor: c.accent, borderRadius: 3, maxBarThickness: 24 },
      ] },
      options: Object.assign({}, common, { plugins: { legend: { display: false } }, scales: axes(c) }),
    });

    function show(next) {
      document.querySelectorAll("[data-figure]").forEach(function (el) {
        var value = pick(next, el.dataset.figure);
        if (value != null) el.textContent = Number(value).toLocaleString("en-US");
      });
      var plans = document.getElementById("dashboard-plans");
      plans.replaceChildren.apply(plans, next.plans.map(function (row) {
        var tr = document.createElement("tr");
        [row.plan, Number(row.users).toLocaleString("en-US")].forEach(function (text) {
          var td = document.createElement("td");
          td.textContent = text;
          tr.appendChild(td);
        });
        return tr;
      }));
      lastHour.data.labels = next.last_hour.labels;
      lastHour.data.datasets[0].data = next.last_hour.questions;
      lastHour.data.datasets[1].data = next.last_hour.answers;
      today.data.labels = next.today.labels;
      today.data.datasets[0].data = next.today.tokens;
      lastHour.update();
      today.update();
      var updated = document.getElementById("dashboard-updated");
      updated.dateTime = next.generated_at;
      updated.textContent = new Date(next.generated_at).toLocaleTimeString([], { hour12: false });
    }

    function refresh() {
      fetch(script.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (next) { if (next) show(next); })
        .catch(function () { /* offline for a moment: the next refresh tries again */ });
    }
    window.setInterval(refresh, REFRESH_MS);

    new MutationObserver(function () {
      var n = colours();
      lastHour.data.datasets[0].borderColor = lastHour.data.datasets[0].backgroundColor = n.accent;
      lastHour.data.datasets[1].borderColor = lastHour.data.datasets[1].backgroundColor = n.second;
      today.data.datasets[0].backgroundColor = n.accent;
      [lastHour, today].forEach(function (chart) {
        chart.options.scales = axes(n);
        if (chart.options.plugins.legend.labels) chart.options.plugins.legend.labels.color = n.text;
        chart.update();
      });
    }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
