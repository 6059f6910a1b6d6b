// Inline math wider than its line scrolls sideways with a visible scrollbar (class attnsvm-wide, book.css); a
// formula that pokes out of its box by a few pixels (an accent, an italic correction) is left as it is. Run once
// MathJax has typeset the page, and again when the window changes width.
(function () {
  var SLACK = 4;  // CSS px: an overhang this small is not cut off and needs no scrollbar
  function mark() {
    document.querySelectorAll('.bd-article span.math').forEach(function (math) {
      math.classList.remove('attnsvm-wide');
      // the typeset formula's width (MathJax's hidden copy for screen readers is often wider)
      var shown = math.querySelector('mjx-math');
      var width = shown ? shown.getBoundingClientRect().width : math.scrollWidth;
      if (width > math.clientWidth + SLACK) math.classList.add('attnsvm-wide');
    });
  }
  function whenTypeset() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(mark);
    else setTimeout(whenTypeset, 50);
  }
  document.addEventListener('DOMContentLoaded', whenTypeset);
  window.addEventListener('resize', mark);
})();
