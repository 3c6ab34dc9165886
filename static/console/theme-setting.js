// Runs before js/theme.js in the staff console: the admin's <html> element cannot carry the account's
// theme setting as the product's pages do, so it is copied there from the page's <meta name="theme-setting">.
(function () {
  "use strict";
  var meta = document.querySelector('meta[name="theme-setting"]');
  if (!meta) return;
  var root = document.documentElement;
  root.dataset.themeSetting = meta.content;
  root.dataset.themeUrl = meta.dataset.url;
})();
