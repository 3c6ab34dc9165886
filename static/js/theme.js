// Loaded in <head> so the theme applies before the first paint (no flash of the wrong theme).
//
// The source of the theme: for a signed-in person, the setting saved on their account (the server
// renders it as <html data-theme-setting>: "light", "dark" or "system"); for a visitor, the choice kept
// in this browser (localStorage). "system" follows the device's light/dark preference, live.
// The header's toggle switches between light and dark, and for a signed-in person saves that as the
// setting (POST data-theme-url), so the Settings page, the toggle and every tab agree.
(function () {
  var KEY = "theme";
  var root = document.documentElement;
  var media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function stored() {
    try { return localStorage.getItem(KEY); } catch (e) { return null; /* storage may be blocked */ }
  }
  function store(value) {
    try { localStorage.setItem(KEY, value); } catch (e) { /* ignore */ }
  }
  function setting() {
    return root.dataset.themeSetting || stored() || "system";
  }
  function resolve(value) {
    if (value === "light" || value === "dark") return value;
    return media && media.matches ? "dark" : "light";
  }
  function apply(value) {
    root.dataset.theme = resolve(value);
    document.dispatchEvent(new CustomEvent("themechange", { detail: { theme: root.dataset.theme, setting: value } }));
  }

  if (root.dataset.themeSetting) store(root.dataset.themeSetting);
  apply(setting());
  if (media && media.addEventListener) {
    media.addEventListener("change", function () { if (setting() === "system") apply("system"); });
  }

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var meta = document.querySelector('meta[name="csrf-token"], input[name="csrfmiddlewaretoken"]');
    return meta ? (meta.content || meta.value) : "";
  }

  function save(value) {
    store(value);
    if (!root.dataset.themeSetting) return; // a visitor: this browser is the only place it lives
    root.dataset.themeSetting = value;
    var body = new URLSearchParams({ theme: value });
    fetch(root.dataset.themeUrl, {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), "Content-Type": "application/x-www-form-urlencoded" },
    }).then(function (response) {
      root.dataset.themeSaved = response.ok ? value : "";
    }, function () { root.dataset.themeSaved = ""; });
  }

  // For the Settings page's preview: apply a setting without saving it.
  window.sglTheme = { apply: apply, setting: setting };

  // The toggle's words come from the JavaScript catalog (gettext), which base.html loads after this
  // script: it is defined by DOMContentLoaded, the only time they are needed (English if it is missing).
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    var gettext = typeof window.gettext === "function" ? window.gettext : function (text) { return text; };
    var label = function () {
      var dark = root.dataset.theme === "dark";
      button.setAttribute("aria-pressed", String(dark));
      button.textContent = dark ? gettext("Light theme") : gettext("Dark theme");
    };
    label();
    document.addEventListener("themechange", label);
    button.addEventListener("click", function () {
      var next = root.dataset.theme === "dark" ? "light" : "dark";
      save(next);
      apply(next);
    });
  });
})();
