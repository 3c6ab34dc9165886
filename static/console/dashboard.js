// The staff dashboard (the console's index): draws the service's last hour and today's figures with
// Chart.js (vendored under static/vendor/chart.js/) and refreshes them every 30 seconds from the
// console's dashboard.json. Colours come from the theme's CSS variables and follow the light/dark toggle.
(function () {
  "use strict";
  var REFRESH_MS = 30000;

  function token(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function colours() {
    return { accent: token("--accent"), ok: token("--ok"), warn: token("--warn"), danger: token("--danger"),
      strong: token("--text"), text: token("--muted"), grid: token("--border") };
  }
  function number(value) {
    return value == null ? "–" : Number(value).toLocaleString("en-US");
  }
  function pick(data, path) {
    return path.split(".").reduce(function (value, key) { return value == null ? value : value[key]; }, data);
  }

  function line(label, data, colour, extra) {
    return Object.assign({ label: label, data: data || [], borderColor: colour, backgroundColor: colour,
      pointRadius: 0, tension: 0, borderWidth: 2 }, extra);  // straight: a curve overshoots its points
  }
  // Sparse series (a figure only for minutes with answers): dots mark the minutes that have one.
  var SPARSE = { pointRadius: 2, spanGaps: true };
  function bar(label, data, colour) {
    return { label: label, data: data || [], backgroundColor: colour, borderRadius: 2, maxBarThickness: 24 };
  }

  // Each chart: its canvas, its type, how its datasets come from the figures, and its y axis.
  var CHARTS = [
    { id: "chart-last-hour", type: "line", build: function (d, c) {
      var h = d.last_hour;
      return [line("Questions", h.questions, c.accent), line("Answers", h.answers, c.ok, { borderDash: [5, 3] }),
        line("API completions", h.api, c.warn)];
    } },
    { id: "chart-load", type: "line", build: function (d, c) {
      var h = d.last_hour, nodeColours = [c.accent, c.ok, c.warn, c.danger];
      var sets = [line("Generating", h.in_flight, c.strong, SPARSE)];
      Object.keys(h.nodes || {}).forEach(function (name, i) {
        var colour = nodeColours[i % nodeColours.length];
        sets.push(line(name + " running", h.nodes[name].running, colour, SPARSE));
        sets.push(line(name + " queued", h.nodes[name].waiting, colour, Object.assign({ borderDash: [5, 3] }, SPARSE)));
      });
      return sets;
    } },
    { id: "chart-ttft", type: "line", build: function (d, c) {
      return [line("p50", d.last_hour.ttft_p50, c.accent, SPARSE), line("p95", d.last_hour.ttft_p95, c.warn, SPARSE)];
    } },
    { id: "chart-tokens", type: "bar", build: function (d, c) {
      return [bar("Tokens per second", d.last_hour.tokens_per_second, c.accent)];
    }, y: { precision: 1 } },
    { id: "chart-cache", type: "line", build: function (d, c) {
      return [line("Cached share of prompt tokens", d.last_hour.cache_hit_rate, c.ok, SPARSE)];
    }, y: { max: 100, precision: 1 } },
    { id: "chart-refused", type: "bar", stacked: true, build: function (d, c) {
      var r = d.last_hour.refused || {};
      return [bar("429 too many", r["429"], c.warn), bar("503 busy", r["503"], c.danger)];
    } },
    { id: "chart-moderation", type: "bar", stacked: true, build: function (d, c) {
      var m = d.last_hour.moderation;
      return [bar("Inputs", m.input, c.accent), bar("Answers", m.output, c.danger), bar("Reports", m.user_report, c.warn)];
    } },
    { id: "chart-today", type: "bar", labels: "today", build: function (d, c) {
      return [bar("Tokens", d.today.tokens, c.accent)];
    } },
    { id: "chart-saved", type: "bar", labels: "today", stacked: true, build: function (d, c) {
      return [bar("Prompt tokens from prefix caches", d.today.saved_prefix, c.ok),
        bar("Answers from the response cache", d.today.saved_answers, c.accent),
        bar("Easy turns Auto gave the small model", d.today.auto_small, c.warn)];
    } },
  ];

  function options(spec, datasets, c) {
    var y = Object.assign({ beginAtZero: true, stacked: !!spec.stacked, grid: { color: c.grid }, border: { display: false },
      ticks: { color: c.text, precision: (spec.y && spec.y.precision) || 0,
        callback: function (v) { return Number(v).toLocaleString(); } } }, spec.y && spec.y.max ? { max: spec.y.max } : {});
    return {
      responsive: true, maintainAspectRatio: false, animation: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { display: datasets.length > 1, labels: { color: c.text, boxWidth: 12 } } },
      scales: {
        x: { stacked: !!spec.stacked, grid: { display: false },
          ticks: { color: c.text, maxRotation: 0, autoSkip: true, autoSkipPadding: 14 } },
        y: y,
      },
    };
  }

  function chartData(spec, data, c) {
    var datasets = spec.build(data, c);
    return { labels: (spec.labels === "today" ? data.today : data.last_hour).labels, datasets: datasets };
  }

  function cell(content) {
    var td = document.createElement("td");
    if (content instanceof Node) td.appendChild(content);
    else td.textContent = content;
    return td;
  }
  function fill(tbody, rows, toCells, empty, columns) {
    var trs = rows.map(function (row) {
      var tr = document.createElement("tr");
      toCells(row).forEach(function (td) { tr.appendChild(td instanceof Node && td.tagName === "TD" ? td : cell(td)); });
      return tr;
    });
    if (!trs.length && empty) {
      var tr = document.createElement("tr"), td = cell(empty);
      td.colSpan = columns;
      tr.appendChild(td);
      trs.push(tr);
    }
    tbody.replaceChildren.apply(tbody, trs);
  }
  function percent(value) { return value == null ? "–" : value + "%"; }
  function healthBadge(health) {
    var span = document.createElement("span");
    span.className = "console-badge console-badge-" + (health === "up" ? "ok" : health === "down" ? "danger" : "warn");
    span.textContent = health;
    return cell(span);
  }
  function nodeCells(node) {
    var cells = [node.name, node.group, healthBadge(node.health), node.state];
    var load = node.load;
    if (!load) {
      var none = cell("no recent load sample");
      none.colSpan = 5;
      none.className = "console-muted";
      return cells.concat([none]);
    }
    return cells.concat([number(load.running) + (load.max_running ? " of " + number(load.max_running) : ""),
      number(load.waiting), percent(load.token_usage), percent(load.cache_hit_rate), number(load.gen_throughput)]);
  }

  function start() {
    var source = document.getElementById("dashboard-data");
    var script = document.getElementById("dashboard-script");
    if (!source || !script || typeof window.Chart === "undefined") return;
    var data = JSON.parse(source.textContent);

    var charts = CHARTS.map(function (spec) {
      var c = colours(), chart = chartData(spec, data, c);
      return { spec: spec, chart: new window.Chart(document.getElementById(spec.id), {
        type: spec.type, data: chart, options: options(spec, chart.datasets, c) }) };
    });
    function draw() {
      var c = colours();
      charts.forEach(function (entry) {
        entry.chart.data = chartData(entry.spec, data, c);
        entry.chart.options = options(entry.spec, entry.chart.data.datasets, c);
        entry.chart.update();
      });
    }

    function show(next) {
      data = next;
      document.querySelectorAll("[data-figure]").forEach(function (el) {
        el.textContent = number(pick(next, el.dataset.figure));
      });
      fill(document.getElementById("dashboard-plans"), next.plans, function (row) {
        return [row.plan, number(row.users)];
      });
      fill(document.getElementById("dashboard-moderation"), next.moderation_categories, function (row) {
        return [row.category, number(row.input), number(row.output), number(row.user_report), number(row.blocked)];
      }, "No flags in the last hour.", 5);
      fill(document.getElementById("dashboard-nodes"), next.nodes, nodeCells);
      draw();
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

    new MutationObserver(draw).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
