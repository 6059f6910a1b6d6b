/* The search page's results (loaded on search.html only, by assets/sphinx/search_sections.py).
 *
 * Sphinx's searchtools.js links each full-text hit to the top of its page and takes the snippet from the page's
 * whole main region: on this theme that region opens with the page's header buttons and table of contents, and
 * its math is TeX source (MathJax has not typeset a fetched page). Here the snippet is read from the article
 * alone: the prose block (paragraph, list item, caption, table cell; a heading or a statement's title with the
 * paragraph after it) that matches the query best, its math as plain text; and the hit links to the section (or
 * API entry) that holds most such blocks.
 */
"use strict";

(() => {
  // where a snippet may come from, and what inside the article is not prose
  const TITLES = "h1, h2, h3, h4, h5, h6, .admonition-title"; // read with the paragraph that follows them
  const BLOCKS = `p, li, dt, dd, figcaption, caption, th, td, ${TITLES}`;
  const NOT_PROSE = [".headerlink", "script", "style", "nav", ".toctree-wrapper", ".cell_input", ".cell_output",
    "pre", "div.math", "details.provenance"].join(", ");
  const CONTEXT = 240; // characters of a snippet, as Sphinx's own

  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", zeta: "ζ", eta: "η", theta: "θ",
    vartheta: "ϑ", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ",
    phi: "φ", varphi: "φ", chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Xi: "Ξ",
    Pi: "Π", Sigma: "Σ", Phi: "Φ", Psi: "Ψ", Omega: "Ω", ell: "ℓ", infty: "∞", nabla: "∇", partial: "∂", top: "⊤",
    le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", approx: "≈", sim: "∼", simeq: "≃", equiv: "≡",
    propto: "∝", in: "∈", notin: "∉", subset: "⊂", subseteq: "⊆", cup: "∪", cap: "∩", setminus: "∖", times: "×",
    cdot: "·", odot: "⊙", otimes: "⊗", oplus: "⊕", circ: "∘", to: "→", rightarrow: "→", leftarrow: "←", mapsto: "↦",
    Rightarrow: "⇒", Leftarrow: "⇐", iff: "⇔", forall: "∀", exists: "∃", sum: "∑", prod: "∏", int: "∫", sqrt: "√",
    pm: "±", mp: "∓", langle: "⟨", rangle: "⟩", lVert: "‖", rVert: "‖", Vert: "‖", "|": "‖", lvert: "|", rvert: "|",
    mid: "|", ldots: "…", dots: "…", cdots: "⋯", emptyset: "∅", star: "⋆", ast: "∗", perp: "⊥", "{": "{", "}": "}",
    "%": "%", "&": "&", "#": "#", _: "_", $: "",
  };
  const BLACKBOARD = { R: "ℝ", N: "ℕ", Z: "ℤ", Q: "ℚ", C: "ℂ", E: "𝔼", P: "ℙ" };
  const SPACES = new Set([",", ";", ":", "!", " ", "\\", "quad", "qquad", "enspace", "thinspace"]);
  const DROPPED = new Set(`( ) [ ] mathrm mathbf mathit mathsf mathtt mathcal mathscr mathfrak boldsymbol bm text
    textrm textit textbf textsf texttt operatorname left right big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr
    Biggl Biggr bigm displaystyle textstyle scriptstyle limits nolimits underline nonumber notag`.split(/\s+/));
  const ACCENTS = { hat: "\u0302", widehat: "\u0302", tilde: "\u0303", widetilde: "\u0303", bar: "\u0304",
    overline: "\u0305", dot: "\u0307", ddot: "\u0308", vec: "\u20d7" }; // combining marks
  const SKIPPED = new Set(["begin", "end", "label", "tag"]); // commands whose argument is not shown

  /** TeX (an inline math span's source) as plain text: symbols as Unicode, font and sizing commands dropped. */
  const texToText = (tex) => {
    let out = "";
    let k = 0;
    const group = () => { // the next argument: {...}, a command or one character
      while (tex[k] === " ") k++;
      if (tex[k] === "\\") {
        const command = tex.slice(k).match(/^\\([a-zA-Z]+|.?)/)[0];
        k += command.length;
        return command;
      }
      if (tex[k] !== "{") return tex[k++] || "";
      let depth = 0;
      const start = k;
      for (; k < tex.length; k++) {
        if (tex[k] === "\\") k++;
        else if (tex[k] === "{") depth++;
        else if (tex[k] === "}" && --depth === 0) return tex.slice(start + 1, k++);
      }
      return tex.slice(start + 1);
    };
    const wrap = (arg, operators) => { // an argument's text, in parentheses where it would read ambiguously
      const text = texToText(arg);
      return operators.test(text) ? `(${text})` : text;
    };
    while (k < tex.length) {
      const c = tex[k++];
      if (c === "{" || c === "}") continue;
      if (c === "&" || c === "~") out += " ";
      else if (c === "^" || c === "_") out += c + wrap(group(), /[-+=,/ ]/);
      else if (c !== "\\") out += c;
      else {
        const name = /[a-zA-Z]/.test(tex[k] || "") ? tex.slice(k).match(/^[a-zA-Z]+/)[0] : (tex[k] || "");
        k += name.length;
        if (/^[a-zA-Z]/.test(name)) while (tex[k] === " ") k++; // TeX drops the space after a command word
        if (DROPPED.has(name)) continue;
        if (SPACES.has(name)) out += " ";
        else if (SKIPPED.has(name)) group();
        else if (name === "mathbb") { const arg = group(); out += BLACKBOARD[arg] || arg; }
        else if (name in ACCENTS) out += [...texToText(group())].map((char) => char + ACCENTS[name]).join("");
        else if (name === "sqrt") out += `√${wrap(group(), /./u)}`.replace(/^√\((.)\)$/u, "√$1");
        else if (["frac", "tfrac", "dfrac"].includes(name)) {
          const numerator = wrap(group(), /\S\S/u);
          out += `${numerator}/${wrap(group(), /\S\S/u)}`;
        } else if (name in SYMBOLS) out += SYMBOLS[name];
        else out += /^[a-zA-Z]{2,}$/.test(name) && /\w/.test(tex[k] || "") ? `${name} ` : name; // \log k, \max
      }
    }
    return out.replace(/\s+/g, " ").trim();
  };

  /** The article of a fetched page, reduced to what a reader sees as prose. */
  const article = (html) => {
    const doc = new DOMParser().parseFromString(html, "text/html");
    const root = doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
    if (!root) return null;
    root.querySelectorAll(NOT_PROSE).forEach((element) => element.remove());
    root.querySelectorAll(".math").forEach((element) => {
      element.replaceWith(doc.createTextNode(texToText(element.textContent)));
    });
    return root;
  };

  const escapeRegExp = (text) => text.replace(/[.*+\-?^${}()|[\]\\]/g, "\\$&");
  const wordStart = (term) => new RegExp(`(^|[^\\p{L}\\p{N}_])(${term})`, "iu");

  /** The query's words (each as typed or as its stem) and the whole phrase, as regular expressions. */
  const patterns = (keywords) => {
    const query = new URLSearchParams(window.location.search).get("q") || "";
    const words = splitQuery(query.toLowerCase()).filter((word) => !stopwords.includes(word) && !/^\d+$/.test(word));
    const stemmer = new Stemmer();
    const forms = words.map((word) => wordStart([word, stemmer.stemWord(word)].map(escapeRegExp).join("|")));
    if (!forms.length) forms.push(...[...keywords].map((word) => wordStart(escapeRegExp(word))));
    const phrase = words.length > 1 ? wordStart(words.map(escapeRegExp).join("[\\s\\-\u2010-\u2014]+")) : null;
    return { forms, phrase };
  };

  const textOf = (element) => element.textContent.replace(/\s+/g, " ").trim();
  const unique = (element) => element.ownerDocument.querySelectorAll(`[id="${CSS.escape(element.id)}"]`).length === 1;

  /** The innermost section (or API entry) that holds a block: [id, its heading ("" for the page's own)]; sections
   * whose id is not unique (sphinx-proof gives every statement's body the same) are skipped. */
  const placeOf = (block) => {
    for (let node = block; node; node = node.parentElement) {
      const term = node.tagName === "DD" && node.previousElementSibling;
      if (term && term.tagName === "DT" && term.id) {
        return [term.id, textOf(term.querySelector(".sig-name") || term)];
      }
      if (node.tagName === "SECTION" && node.id && unique(node)) {
        const heading = node.querySelector(":scope > h2, :scope > h3, :scope > h4, :scope > h5, :scope > h6");
        return [node.id, heading ? textOf(heading) : ""];
      }
    }
    return null;
  };

  /** A block's text; a title's followed by the paragraph after it. */
  const readBlock = (block) => {
    if (!block.matches(TITLES)) return textOf(block);
    const next = block.nextElementSibling;
    const paragraph = next && (next.matches("p") ? next : next.querySelector("p"));
    return paragraph ? `${textOf(block)}: ${textOf(paragraph)}` : textOf(block);
  };

  /** The blocks that match best (the phrase > every word > some word), in page order: their text, their place,
   * whether they are a title and whether a heading. */
  const bestBlocks = (root, { forms, phrase }) => {
    let best = [];
    let bestLevel = 0;
    for (const block of root.querySelectorAll(BLOCKS)) {
      if (block.querySelector(BLOCKS)) continue; // the innermost block only (a list item holding paragraphs)
      const text = textOf(block);
      const found = forms.filter((form) => form.test(text)).length;
      if (!found) continue;
      const level = phrase && phrase.test(text) ? 3 : found === forms.length ? 2 : 1;
      if (level > bestLevel) [best, bestLevel] = [[], level];
      if (level === bestLevel) {
        best.push({ text: readBlock(block), place: placeOf(block), title: block.matches(TITLES),
          heading: /^H[1-6]$/.test(block.tagName) });
      }
    }
    return best;
  };

  /** The place with most of the best blocks (its own heading counts twice; the first such place on a tie) and its
   * first prose block (else its title). */
  const choose = (blocks) => {
    const key = ({ place }) => (place ? place[0] : null);
    const weights = new Map();
    blocks.forEach((block) => weights.set(key(block), (weights.get(key(block)) || 0) + 1 + block.heading));
    const top = Math.max(...weights.values());
    const first = blocks.find((block) => weights.get(key(block)) === top);
    return blocks.find((block) => key(block) === key(first) && !block.title) || first;
  };

  /** About CONTEXT characters of text around its first match, cut at word boundaries. */
  const around = (text, { forms, phrase }) => {
    const match = (phrase && phrase.exec(text)) || forms.map((form) => form.exec(text)).find((found) => found);
    const at = match ? match.index + match[1].length : 0;
    let start = Math.max(0, at - CONTEXT / 3);
    if (start > 0) start = text.indexOf(" ", start) + 1 || start;
    let end = Math.min(text.length, start + CONTEXT);
    if (end < text.length && text.lastIndexOf(" ", end) > at) end = text.lastIndexOf(" ", end);
    return (start > 0 ? "..." : "") + text.slice(start, end).trim() + (end < text.length ? "..." : "");
  };

  const makeSearchSummary = (htmlText, keywords, anchor) => {
    const summary = document.createElement("p");
    summary.classList.add("context");
    let root = article(htmlText);
    if (!root) return summary;
    const section = anchor && root.querySelector(`#${CSS.escape(anchor.slice(1))}`);
    if (section) root = section;
    const query = patterns(keywords);
    const blocks = bestBlocks(root, query);
    if (!blocks.length) {
      const first = root.querySelector("p");
      summary.textContent = first ? around(textOf(first), query) : "";
      return summary;
    }
    const chosen = choose(blocks);
    summary.textContent = around(chosen.text, query);
    if (!section && chosen.place) {
      const [id, heading] = chosen.place;
      // the link is the result's: searchtools appends the summary to the result's list item at once
      queueMicrotask(() => {
        const link = summary.parentElement && summary.parentElement.querySelector("a");
        if (!link) return;
        link.href = `${link.getAttribute("href").split("#")[0]}#${id}`;
        if (heading) link.textContent = `${link.textContent} > ${heading}`;
      });
    }
    return summary;
  };

  document.addEventListener("DOMContentLoaded", () => {
    if (typeof Search !== "undefined") Search.makeSearchSummary = makeSearchSummary;
  });
})();
