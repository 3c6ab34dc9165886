// A button with data-confirm asks before its form is sent (an irreversible action: deleting a file).
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) event.preventDefault();
});
