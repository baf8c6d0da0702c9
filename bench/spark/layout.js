// Injected into a copy of the report by bench/spark/browser.py: records where the
// scenario tables and charts landed, as JSON in a pre element (id layout-probe) for --dump-dom.
window.addEventListener("load", function () {
  function box(el) {
    var r = el.getBoundingClientRect();
    return {top: r.top + window.scrollY, left: r.left + window.scrollX,
            bottom: r.bottom + window.scrollY, right: r.right + window.scrollX,
            id: el.id || "", alt: el.alt || "", text: (el.textContent || "").slice(0, 60)};
  }
  var out = {
    width: window.innerWidth,
    tables: Array.prototype.map.call(document.querySelectorAll("table.iep"), box),
    headers: Array.prototype.map.call(document.querySelectorAll("table.iep thead"), function (h) {
      return h.textContent; }),
    charts: Array.prototype.map.call(document.querySelectorAll(".scen img"), box),
    sentences: Array.prototype.map.call(document.querySelectorAll("p.sentence"), box),
    images_loaded: Array.prototype.every.call(document.images, function (i) {
      return i.complete && i.naturalWidth > 0; })
  };
  var pre = document.createElement("pre");
  pre.id = "layout-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
