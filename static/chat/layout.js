// The frame around the conversation: at phone width the sidebar is a slide-over (toggled by a
// button, closed by Esc, the scrim, or picking a chat), and the browser's theme-color follows the
// light/dark toggle so the phone status bar and the installed app's title bar match the page.

export function createLayout(app) {
  const toggle = document.getElementById("sidebar-toggle");
  const phone = window.matchMedia("(max-width: 800px)");

  const isOpen = () => app.dataset.sidebar === "open";

  // `focus`: the id of what takes the focus (New chat by default; the search box for Ctrl+K).
  function open({ focus = "new-chat" } = {}) {
    app.dataset.sidebar = "open";
    toggle.setAttribute("aria-expanded", "true");
    document.getElementById(focus).focus();
  }

  function close({ focus = false } = {}) {
    if (!isOpen()) return;
    app.dataset.sidebar = "closed";
    toggle.setAttribute("aria-expanded", "false");
    if (focus) toggle.focus();
  }

  toggle.addEventListener("click", () => (isOpen() ? close({ focus: true }) : open()));
  document.getElementById("sidebar-close").addEventListener("click", () => close({ focus: true }));
  document.getElementById("scrim").addEventListener("click", () => close({ focus: true }));
  phone.addEventListener("change", () => close());

  const themeMeta = document.querySelector('meta[name="theme-color"]');
  const paintThemeColor = () => {
    themeMeta.content = getComputedStyle(document.documentElement).getPropertyValue("--surface").trim() || "#ffffff";
  };
  new MutationObserver(paintThemeColor).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  paintThemeColor();

  return {
    openSidebar: open,
    closeSidebar: close,
    /** The slide-over is showing (on a phone); Esc closes it before it stops an answer. */
    sidebarCovers: () => isOpen() && phone.matches,
  };
}
