// Copy buttons: <button data-copy="ID"> copies the text of the element with that id, and says so on
// the button for a moment. Where the clipboard is not available (a page served over plain HTTP), the
// text is selected instead, so the usual copy shortcut takes it.
/* global gettext */

const SAID_FOR_MS = 2000;

function select(element) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

function say(button, text) {
  const label = button.dataset.label ?? (button.dataset.label = button.textContent);
  const name = button.dataset.name ?? (button.dataset.name = button.getAttribute("aria-label") || label);
  button.textContent = text;
  button.setAttribute("aria-label", text);
  button.classList.add("copied");
  clearTimeout(button.copyTimer);
  button.copyTimer = setTimeout(() => {
    button.textContent = label;
    button.setAttribute("aria-label", name);
    button.classList.remove("copied");
  }, SAID_FOR_MS);
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    say(button, gettext("Copied"));
  } catch {
    select(source);
    say(button, gettext("Selected: press Ctrl+C"));
  }
});
