// The Settings page: a live character count for the custom instructions, and a preview of the theme
// as it is chosen (saved with the form, like everything else on the page).
const instructions = document.getElementById("custom_instructions");
const count = document.getElementById("custom_instructions-count");
if (instructions && count) {
  const max = Number(count.dataset.max);
  const update = () => {
    const lang = document.documentElement.lang || undefined; // numbers as the page's language writes them
    count.textContent = `${instructions.value.length.toLocaleString(lang)} / ${max.toLocaleString(lang)}`;
    count.classList.toggle("over", instructions.value.length > max);
  };
  instructions.addEventListener("input", update);
  update();
}

for (const radio of document.querySelectorAll('input[name="theme"]')) {
  radio.addEventListener("change", () => { if (radio.checked && window.sglTheme) window.sglTheme.apply(radio.value); });
}
