// The side panel a citation opens: the file, its page and heading, and the cited passage marked
// within the text around it. The passage is fetched when opened (its owner's only).
/* global gettext, interpolate */
import { el } from "./dom.js";

export function createPassagePanel({ api }) {
  const panel = document.getElementById("passage-panel");
  const title = document.getElementById("passage-title");
  const where = document.getElementById("passage-where");
  const body = document.getElementById("passage-body");
  let opener = null;

  panel.addEventListener("close", () => { if (opener && opener.isConnected) opener.focus(); });
  panel.addEventListener("click", (e) => { if (e.target === panel) panel.close(); }); // the backdrop

  return {
    async open(source, from = null) {
      opener = from;
      title.textContent = source.name;
      where.textContent = [source.page ? interpolate(gettext("Page %(page)s"), { page: source.page }, true) : null, source.heading || null].filter(Boolean).join(" · ");
      body.replaceChildren(el("p", { class: "passage-loading", text: gettext("Opening the passage…") }));
      if (!panel.open) panel.showModal();
      try {
        const found = await api.passage(source.chunk_id);
        const cited = el("mark", { class: "passage-cited", text: found.text, dir: "auto" });
        body.replaceChildren(
          found.before ? el("p", { class: "passage-around", text: found.before, dir: "auto" }) : "",
          el("p", {}, cited),
          found.after ? el("p", { class: "passage-around", text: found.after, dir: "auto" }) : "");
        cited.scrollIntoView({ block: "center" });
      } catch (error) {
        body.replaceChildren(el("p", { class: "passage-error", role: "alert", text: error.message }));
      }
    },
  };
}
