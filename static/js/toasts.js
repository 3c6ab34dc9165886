// Brief notices ("Successfully signed in", a plan change) on pages that have no room for an alert
// in their flow, such as the chat. The server renders them into #toasts; this module re-announces
// them to screen readers (a live region filled before load is not read out), lets each be
// dismissed, and takes each away after a few seconds, longer for warnings and errors. A pointer
// over a notice, or focus inside it, holds it.

const SHOWN_FOR_MS = { success: 5000, info: 5000, debug: 5000, warning: 10000, error: 10000 };

function dismiss(toast) {
  if (!toast.isConnected) return;
  toast.classList.add("leaving");
  const remove = () => toast.remove();
  toast.addEventListener("transitionend", remove, { once: true });
  setTimeout(remove, 400); // no transition (reduced motion): remove at once, near enough
}

function schedule(toast) {
  const level = toast.dataset.level || "info";
  let timer = null;
  const start = () => { timer = setTimeout(() => dismiss(toast), SHOWN_FOR_MS[level] || 5000); };
  const hold = () => { clearTimeout(timer); timer = null; };
  const resume = () => { if (!timer && !toast.matches(":hover, :focus-within")) start(); };
  toast.addEventListener("pointerenter", hold);
  toast.addEventListener("pointerleave", resume);
  toast.addEventListener("focusin", hold);
  toast.addEventListener("focusout", resume);
  toast.querySelector(".toast-close")?.addEventListener("click", () => dismiss(toast));
  start();
}

const region = document.getElementById("toasts");
if (region) {
  const toasts = [...region.children];
  region.replaceChildren();
  requestAnimationFrame(() => {
    for (const toast of toasts) {
      region.append(toast);
      schedule(toast);
    }
    region.dataset.ready = "true";
  });
}
