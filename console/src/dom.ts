// A small DOM toolkit: elements from a tag, attributes and children, and
// tables with captions. Text always goes in as text, never as HTML.

export type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | ((e: Event) => void) | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

export function replace(el: Element, ...children: Child[]): void {
  // Pages redraw every few seconds: the keyboard's place (a row's link or
  // button) moves to its counterpart in the new content, not to the body.
  const focused = document.activeElement;
  const key = focused instanceof HTMLElement && focused !== el && el.contains(focused) ? focusKey(focused) : undefined;
  el.replaceChildren();
  append(el, children);
  if (key === undefined) return;
  for (const candidate of el.querySelectorAll<HTMLElement>("a, button, input, select, textarea")) {
    if (focusKey(candidate) === key) {
      candidate.focus({ preventScroll: true });
      return;
    }
  }
}

// focusKey names a control by what it is and where: its tag, its key (a
// data-key that outlives a change of text, such as Pause becoming
// Resume), name, link, accessible name or text, and its row's data
// attributes (a row of a redrawn table).
function focusKey(e: HTMLElement): string {
  const row = e.closest("tr");
  const rowKey = row ? Object.entries(row.dataset).map(([k, v]) => `${k}=${v}`).join("&") : "";
  const what = e.dataset.key ?? e.getAttribute("name") ?? e.getAttribute("href") ?? e.getAttribute("aria-label") ?? (e.title || e.textContent) ?? "";
  return `${e.tagName}|${what}|${rowKey}`;
}

export interface Column<T> {
  label: string;
  cell: (row: T) => Child;
  className?: string;
}

/** A table with a caption; rowAttrs can mark rows (a class, a test id). */
export function table<T>(caption: string, columns: Column<T>[], rows: T[], rowAttrs?: (row: T) => Attrs, empty = "None."): HTMLElement {
  const t = h(
    "table",
    {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col", class: c.className }, c.label)))),
  );
  const body = h("tbody");
  for (const r of rows) body.appendChild(h("tr", rowAttrs?.(r) ?? {}, ...columns.map((c) => cellOf(c.className, c.cell(r)))));
  if (rows.length === 0) body.appendChild(h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, empty)));
  t.appendChild(body);
  return h("div", { class: "table-wrap" }, t);
}

// A text longer than this is cut in its cell (style.css: td.long) and
// shown whole on hover: a 200-character lane key pushed every column
// after it, buttons included, off the screen.
const longCell = 48;

function cellOf(className: string | undefined, content: Child): HTMLElement {
  // A link's text too: a 200-character lane key's link pushed the row's
  // buttons 2,800 px to the right.
  const text = typeof content === "string" ? content : content instanceof Element && !content.querySelector("button") ? (content.textContent ?? "") : "";
  if (text.length > longCell) {
    return h("td", { class: [className, "long"].filter(Boolean).join(" "), title: text }, content);
  }
  return h("td", { class: className }, content);
}

/** A labelled input; the label's text is what a person (and a test) finds it by. */
export function field(label: string, input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement): HTMLLabelElement {
  return h("label", { class: "field" }, h("span", {}, label), input);
}

/**
 * submitForm is a form whose submit (Enter in one of its inputs, or its
 * submit button) calls onSubmit. Its other buttons are type="button".
 * novalidate: the page's own checks speak, as they do on a click.
 */
export function submitForm(attrs: Attrs, onSubmit: () => void, ...children: Child[]): HTMLFormElement {
  const f = h("form", { novalidate: true, ...attrs }, ...children);
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    onSubmit();
  });
  return f;
}

/**
 * A status line that shows errors in plain words, and successes. An
 * error's lines after its first (a filter quoted with a caret under the
 * column at fault) are shown as written, in a fixed-width font, so the
 * caret stands under that column. An "action" line says what an action
 * of the page did: only the latest action's outcome shows, so one that
 * succeeds clears an older one's error in another section (a refused
 * Remove OAuth2 stayed red under every later success). A "load" line is
 * a section's refresh.
 */
export function status(kind: "load" | "action" = "load"): { el: HTMLElement; error: (msg: string) => void; ok: (msg: string) => void; clear: () => void } {
  const el = h("p", { class: "status", role: "status", "aria-live": "polite", "data-status": kind });
  const clear = (): void => {
    el.className = "status";
    el.setAttribute("role", "status");
    el.textContent = "";
  };
  const othersClear = (): void => {
    if (kind !== "action") return;
    for (const other of document.querySelectorAll<HTMLElement>('[data-status="action"]')) {
      if (other !== el && other.textContent) {
        other.className = "status";
        other.setAttribute("role", "status");
        other.textContent = "";
      }
    }
  };
  return {
    el,
    error: (msg) => {
      othersClear();
      el.className = "status error";
      el.setAttribute("role", "alert");
      const [first = "", ...rest] = msg.split("\n");
      el.replaceChildren(first, ...(rest.length > 0 ? [h("code", { class: "snippet" }, rest.join("\n"))] : []));
    },
    ok: (msg) => {
      othersClear();
      el.className = "status ok";
      el.setAttribute("role", "status");
      el.textContent = msg;
    },
    clear,
  };
}

// A notice for the next page: what an action did when it also left the
// page (a delete goes back to the list), shown once at the top.
let notice = "";

/** noticeNext shows msg at the top of the next page. */
export function noticeNext(msg: string): void {
  notice = msg;
}

/** takeNotice is the notice for the page being drawn ("" when none), once. */
export function takeNotice(): string {
  const n = notice;
  notice = "";
  return n;
}
