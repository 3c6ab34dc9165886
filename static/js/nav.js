// The site header on a phone: its links slide over from the side (the chat page's pattern for its
// conversations), opened by the Menu button and closed by Esc, the scrim, the close button, or the
// screen growing wide enough to show them in a row. The chat page keeps its own header layout.

const header = document.querySelector(".site-header");
const toggle = document.getElementById("nav-toggle");
const nav = document.getElementById("site-nav");
const phone = window.matchMedia("(max-width: 800px)");

if (header && toggle && nav) {
  const isOpen = () => header.dataset.nav === "open";

  const open = () => {
    header.dataset.nav = "open";
    toggle.setAttribute("aria-expanded", "true");
    nav.querySelector("a, button:not(.nav-close)")?.focus();
  };

  const close = ({ focus = false } = {}) => {
    if (!isOpen()) return;
    header.dataset.nav = "closed";
    toggle.setAttribute("aria-expanded", "false");
    if (focus) toggle.focus();
  };

  toggle.addEventListener("click", () => (isOpen() ? close({ focus: true }) : open()));
  document.getElementById("nav-close")?.addEventListener("click", () => close({ focus: true }));
  document.getElementById("nav-scrim")?.addEventListener("click", () => close({ focus: true }));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && isOpen()) close({ focus: true });
  });
  phone.addEventListener("change", () => close());
}
