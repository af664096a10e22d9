/* transformerbook: make the visible sidebar toggles work (pydata-sphinx-theme 0.17+ with sphinx-book-theme).
 *
 * Both themes bind their sidebar handlers with `document.querySelector(".primary-toggle")` (and
 * ".secondary-toggle"), which returns the first such button in the page: a navbar button that sphinx-book-theme
 * hides. The buttons a reader sees (in the article header) get no handler, so on a phone the drawers never open
 * and on a desktop the sidebar never collapses (pydata-sphinx-theme issue 2451, sphinx-book-theme issue 988).
 * Smallest workaround: a click on any other toggle of the same kind is forwarded to the first one, which carries
 * the themes' own handlers (a drawer dialog on narrow screens, collapsing the sidebar on wide ones).
 * Remove this file once the pinned themes bind every toggle (see site/constraints.txt).
 */
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(kind);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
});
