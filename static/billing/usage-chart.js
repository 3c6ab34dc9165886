// The Usage page's daily chart (Chart.js, vendored under static/vendor/chart.js/). Its data comes
// from the page's json_script element; colours come from the theme's CSS variables and follow the
// light/dark toggle. Words come from the JavaScript catalog (base.html), numbers are written as the page's
// language writes them.
/* global gettext, ngettext, interpolate */
(function () {
  "use strict";

  var lang = document.documentElement.lang || undefined;

  function start() {
    var source = document.getElementById("usage-chart-data");
    var canvas = document.getElementById("usage-chart");
    if (!source || !canvas || typeof window.Chart === "undefined") return;
    var data = JSON.parse(source.textContent);
    // Days given as ISO dates ("2025-01-05") are named in the page's language ("Jan 5" in English);
    // otherwise the server's labels are shown as they are.
    var dayName = new Intl.DateTimeFormat(lang, { month: "short", day: "numeric" });
    var labels = Array.isArray(data.days) ? data.days.map(function (iso) {
      var ymd = iso.split("-").map(Number);
      return dayName.format(new Date(ymd[0], ymd[1] - 1, ymd[2]));
    }) : data.labels;

    function token(name) {
      return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    }

    function colours() {
      return { bar: token("--accent"), text: token("--muted"), grid: token("--border") };
    }

    var c = colours();
    var chart = new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: labels,
        datasets: [{ label: gettext("Tokens"), data: data.tokens, backgroundColor: c.bar, borderRadius: 3, maxBarThickness: 28 }],
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        plugins: {
          legend: { display: false },
          tooltip: {
            callbacks: {
              label: function (item) {
                var n = item.parsed.y;
                return interpolate(ngettext("%(count)s token", "%(count)s tokens", n), { count: n.toLocaleString(lang) }, true);
              },
            },
          },
        },
        scales: {
          x: { grid: { display: false }, ticks: { color: c.text, maxRotation: 0, autoSkip: true, autoSkipPadding: 12 } },
          y: {
            beginAtZero: true,
            grid: { color: c.grid },
            border: { display: false },
            ticks: { color: c.text, precision: 0, callback: function (value) { return Number(value).toLocaleString(lang); } },
          },
        },
      },
    });

    // theme.js switches themes by setting data-theme on <html>; repaint with the new colours.
    new MutationObserver(function () {
      var next = colours();
      chart.data.datasets[0].backgroundColor = next.bar;
      chart.options.scales.x.ticks.color = next.text;
      chart.options.scales.y.ticks.color = next.text;
      chart.options.scales.y.grid.color = next.grid;
      chart.update();
    }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
