/* transformerbook: search ranking and snippets (Sphinx `html_search_scorer`, inlined into language_data.js).
 *
 * Ranking: a reader searching "KV cache" wants the chapter section of that name, not the exercise-checker appendix
 * or the home page's table of contents, which mention the same words. So a section whose title matches the query
 * gets a boost, and the checker pages and the home page a penalty. The other weights are Sphinx's defaults.
 *
 * Snippets: Sphinx cuts them from the text of the page's HTML, where math is still TeX (`\(t\)`); math is reduced to
 * plain symbols here ("\(w_{<t}\)" -> "w<t") and display equations are left out.
 */
var Scorer = {
  score: (result) => {
    const [docname, title, anchor, descr, score, filename, kind] = result;
    let adjusted = score;
    if (kind === "title" && anchor) adjusted += 15; // a section (not the whole page) whose title matches the query
    if (docname === "index" || docname.startsWith("checks/")) adjusted -= 20; // the contents page, the appendix
    return adjusted;
  },
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
};

if (typeof Search !== "undefined" && !Search.bookMathStripped) {
  const htmlToText = Search.htmlToText;
  const plainMath = (tex) =>
    tex
      .replace(/^\\[([]/, "")
      .replace(/\\[)\]]$/, "")
      .replace(/\\(?:mathrm|text|mathbf|operatorname)\{([^{}]*)\}/g, "$1")
      .replace(/\\([A-Za-z]+)/g, "$1")
      .replace(/[{}]|\\,|\\;|\\!/g, "")
      .replace(/[_^]/g, "");
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll("div.math").forEach((el) => el.remove());
    doc.querySelectorAll("span.math").forEach((el) => (el.textContent = plainMath(el.textContent.trim())));
    return htmlToText(doc.documentElement.outerHTML, anchor);
  };
  Search.bookMathStripped = true;
}
