// On a phone a wide table of a cell tagged "table-cards" reads as cards, one per row (book.css): each cell shows
// its column's title, which this copies from the table's header into the cell's data-label, and marks the cells
// without text, which a card leaves out.
(function () {
  function label() {
    document.querySelectorAll('.bd-article .tag_table-cards table').forEach(function (table) {
      var titles = Array.from(table.querySelectorAll('thead th'), function (th) { return th.textContent.trim(); });
      table.querySelectorAll('tbody tr').forEach(function (row) {
        Array.from(row.children).forEach(function (cell, k) {
          if (titles[k]) cell.setAttribute('data-label', titles[k]);
          if (!cell.textContent.trim() && !cell.querySelector('img, svg, picture, video, canvas, mjx-container')) {
            cell.classList.add('attnsvm-empty');  // e.g. an empty paragraph: not CSS's :empty
          }
        });
      });
      table.classList.add('attnsvm-cards');
    });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', label);
  else label();
})();
