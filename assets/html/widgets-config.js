// The ipywidgets HTML manager (_static/widgets/embed-amd.js) loads its fonts relative to its RequireJS
// module path, which by default is the page's own folder. Point that path at _static/widgets/, next to
// this file, so the fonts are found and the book reads offline.
(function () {
  var here = document.currentScript.src;
  var base = here.substring(0, here.lastIndexOf("/") + 1);
  require.config({ paths: { "@jupyter-widgets/html-manager/dist": base + "widgets" } });
})();
