// Reading a manifest's variable declarations in the browser, to build the start form.
//
// The server parses the manifest for real (the text is sent as written);
// this reader only needs the declarations, so it knows the YAML that
// manifests are written in: block mappings and sequences, plain and quoted
// scalars, literal and folded block scalars, flow collections and comments.
// Anything else (anchors, aliases, tags, complex keys) is an `UnsupportedYaml`
// error, and the form falls back to a JSON object of variables.

export class UnsupportedYaml extends Error {}

const KEY = /^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"[\]{},&*!|>%@`-][^:#]*?|-[^\s:#][^:#]*?)\s*:(?:\s+(.*))?$/;

/** A YAML or JSON document as a JavaScript value. */
export function parseManifestText(text) {
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) return JSON.parse(trimmed);
  return new Reader(text).document();
}

const indentOf = (line) => line.length - line.trimStart().length;
const isItem = (text) => text === "-" || text.startsWith("- ");

class Reader {
  constructor(text) {
    this.lines = text.replace(/\r\n?/g, "\n").split("\n");
    this.index = 0;
  }

  fail(message) {
    throw new UnsupportedYaml(`line ${this.index + 1}: ${message}`);
  }

  document() {
    const first = this.peek();
    if (!first) return null;
    if (first.text.includes("\t") && first.indent === 0 && first.text.startsWith("\t")) {
      this.fail("tabs are not indentation");
    }
    const value = this.block(first.indent);
    const rest = this.peek();
    if (rest) this.fail("unexpected text after the document");
    return value;
  }

  /** The next line with content (blank lines, comments and `---` skipped). */
  peek() {
    while (this.index < this.lines.length) {
      const line = this.lines[this.index];
      const text = line.trim();
      if (text === "" || text.startsWith("#") || (indentOf(line) === 0 && text === "---")) {
        this.index += 1;
        continue;
      }
      if (indentOf(line) === 0 && (text === "..." || text.startsWith("%"))) {
        this.fail("directives and document ends are not read here");
      }
      return { indent: indentOf(line), text: line.slice(indentOf(line)) };
    }
    return null;
  }

  block(indent) {
    const line = this.peek();
    if (!line || line.indent < indent) return null;
    if (isItem(line.text)) return this.sequence(line.indent);
    if (KEY.test(stripComment(line.text))) return this.mapping(line.indent);
    this.index += 1;
    return this.scalar(line.text, indent - 1);
  }

  sequence(indent) {
    const items = [];
    for (let line = this.peek(); line && line.indent === indent && isItem(line.text);
      line = this.peek()) {
      const rest = line.text.slice(1).trimStart();
      const column = indent + line.text.length - rest.length;
      if (rest === "" || rest.startsWith("#")) {
        this.index += 1;
        const next = this.peek();
        items.push(next && next.indent > indent ? this.block(next.indent) : null);
      } else if (isItem(rest) || KEY.test(stripComment(rest))) {
        // `- key: value` opens a mapping at the column after the dash.
        this.lines[this.index] = " ".repeat(column) + rest;
        items.push(this.block(column));
      } else {
        this.index += 1;
        items.push(this.scalar(rest, indent));
      }
    }
    return items;
  }

  mapping(indent) {
    const result = {};
    for (let line = this.peek(); line && line.indent === indent && !isItem(line.text);
      line = this.peek()) {
      const found = stripComment(line.text).match(KEY);
      if (!found) this.fail("expected `key: value`");
      const key = unquote(found[1]);
      if (Object.hasOwn(result, key)) this.fail(`duplicate key ${key}`);
      this.index += 1;
      const rest = line.text.slice(line.text.indexOf(":", found[1].length) + 1).trim();
      if (rest === "" || rest.startsWith("#")) {
        const next = this.peek();
        const nested = next && (next.indent > indent || (next.indent === indent && isItem(next.text)));
        result[key] = nested ? this.block(next.indent) : null;
      } else {
        result[key] = this.scalar(rest, indent);
      }
    }
    return result;
  }

  /** The value after `key:` or `- ` (its first line is `text`), owned by a line at `indent`. */
  scalar(text, indent) {
    const first = text[0];
    if (first === "|" || first === ">") return this.blockScalar(stripComment(text), indent);
    if (first === "&" || first === "*" || first === "!") this.fail("anchors, aliases and tags");
    if (first === "[" || first === "{") return flow(this.continued(text, indent, balanced));
    if (first === '"' || first === "'") {
      const whole = this.continued(text, indent, (part) => closedQuote(part, first));
      return quoted(whole.trim(), first, this);
    }
    const parts = [stripComment(text)];
    while (this.index < this.lines.length) {
      const line = this.lines[this.index];
      if (!line.trim() || indentOf(line) <= indent || line.trim().startsWith("#")) break;
      if (KEY.test(stripComment(line.trim()))) break;
      parts.push(stripComment(line.trim()));
      this.index += 1;
    }
    return plain(parts.join(" "));
  }

  continued(text, indent, done) {
    let whole = text;
    while (!done(whole)) {
      if (this.index >= this.lines.length) this.fail("unterminated value");
      whole += `\n${this.lines[this.index].trim()}`;
      this.index += 1;
    }
    return whole;
  }

  blockScalar(header, indent) {
    const found = header.match(/^([|>])([+-]?)(\d?)([+-]?)\s*$/);
    if (!found) this.fail("bad block scalar header");
    const chomp = found[2] || found[4];
    const lines = [];
    let contentIndent = found[3] ? indent + Number(found[3]) : null;
    while (this.index < this.lines.length) {
      const line = this.lines[this.index];
      if (line.trim()) {
        if (contentIndent === null) contentIndent = indentOf(line);
        if (indentOf(line) < contentIndent || contentIndent <= indent) break;
      }
      lines.push(line.slice(contentIndent ?? 0));
      this.index += 1;
    }
    let trailing = 0;
    while (lines.length && !lines[lines.length - 1].trim()) {
      lines.pop();
      trailing += 1;
    }
    let body = found[1] === "|" ? lines.join("\n") : fold(lines);
    if (!lines.length) return "";
    if (chomp === "+") body += "\n".repeat(trailing + 1);
    else if (chomp !== "-") body += "\n";
    return body;
  }
}

function fold(lines) {
  let out = "";
  let previous = null;  // "text", "blank" or "indented"
  for (const line of lines) {
    if (!line.trim()) {
      out += "\n";
      previous = "blank";
      continue;
    }
    const indented = /^\s/.test(line);
    if (previous === null || previous === "blank") out += line;
    else if (indented || previous === "indented") out += `\n${line}`;
    else out += ` ${line}`;
    previous = indented ? "indented" : "text";
  }
  return out;
}

function stripComment(text) {
  let quote = null;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quote) {
      if (c === "\\" && quote === '"') i += 1;
      else if (c === quote) quote = null;
    } else if (c === '"' || c === "'") {
      if (i === 0 || /[\s:[{,]/.test(text[i - 1])) quote = c;
    } else if (c === "#" && (i === 0 || /\s/.test(text[i - 1]))) {
      return text.slice(0, i).trimEnd();
    }
  }
  return text.trimEnd();
}

function closedQuote(text, mark) {
  for (let i = 1; i < text.length; i += 1) {
    if (mark === '"' && text[i] === "\\") i += 1;
    else if (text[i] === mark) {
      if (mark === "'" && text[i + 1] === "'") i += 1;
      else return true;
    }
  }
  return false;
}

function quoted(text, mark, reader) {
  const end = mark === '"' ? text.search(/(?<!\\)(?:\\\\)*"(?=[^"]*$)/) : text.lastIndexOf("'");
  const rest = stripComment(text.slice(end + 1)).trim();
  if (end <= 0 || rest) reader.fail("unexpected text after a quoted value");
  return unquote(text.slice(0, end + 1).replace(/\s*\n\s*/g, " "));
}

function unquote(text) {
  if (text.startsWith('"')) return JSON.parse(text.replace(/\\x([0-9a-fA-F]{2})/g, "\\u00$1"));
  if (text.startsWith("'")) return text.slice(1, -1).replaceAll("''", "'");
  return text;
}

// As PyYAML (YAML 1.1) reads plain scalars, which is how the server reads them.
function plain(text) {
  if (/^(~|null|Null|NULL)?$/.test(text)) return null;
  if (/^(true|True|TRUE|yes|Yes|YES|on|On|ON)$/.test(text)) return true;
  if (/^(false|False|FALSE|no|No|NO|off|Off|OFF)$/.test(text)) return false;
  if (/^[-+]?(0|[1-9][0-9_]*)$/.test(text)) return Number(text.replaceAll("_", ""));
  if (/^[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?$/.test(text)) {
    return Number(text.replaceAll("_", ""));
  }
  if (/^[-+]?\.(inf|Inf|INF)$/.test(text)) return text.startsWith("-") ? -Infinity : Infinity;
  return text;
}

function balanced(text) {
  let depth = 0;
  let quote = null;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quote) {
      if (c === "\\" && quote === '"') i += 1;
      else if (c === quote) quote = null;
    } else if (c === '"' || c === "'") quote = c;
    else if (c === "[" || c === "{") depth += 1;
    else if (c === "]" || c === "}") depth -= 1;
  }
  return depth === 0 && quote === null;
}

/** A flow collection: `[a, "b", {c: 1}]`. */
function flow(text) {
  let at = 0;
  const space = () => {
    while (at < text.length && /\s/.test(text[at])) at += 1;
  };
  const fail = () => {
    throw new UnsupportedYaml(`cannot read the flow value ${text.slice(0, 40)}`);
  };
  const value = () => {
    space();
    const c = text[at];
    if (c === "[") {
      at += 1;
      const list = [];
      for (space(); text[at] !== "]"; space()) {
        list.push(value());
        space();
        if (text[at] === ",") at += 1;
        else if (text[at] !== "]") fail();
      }
      at += 1;
      return list;
    }
    if (c === "{") {
      at += 1;
      const object = {};
      for (space(); text[at] !== "}"; space()) {
        const key = value();
        space();
        if (text[at] !== ":") fail();
        at += 1;
        object[String(key)] = value();
        space();
        if (text[at] === ",") at += 1;
        else if (text[at] !== "}") fail();
      }
      at += 1;
      return object;
    }
    if (c === '"' || c === "'") {
      const start = at;
      for (at += 1; at < text.length; at += 1) {
        if (c === '"' && text[at] === "\\") at += 1;
        else if (text[at] === c) {
          if (c === "'" && text[at + 1] === "'") at += 1;
          else break;
        }
      }
      at += 1;
      return unquote(text.slice(start, at));
    }
    const start = at;
    while (at < text.length && !/[,\]}]/.test(text[at])
           && !(text[at] === ":" && /\s/.test(text[at + 1] ?? " "))) at += 1;
    if (at === start) fail();
    return plain(text.slice(start, at).trim());
  };
  const result = value();
  space();
  if (at < text.length && stripComment(text.slice(at))) fail();
  return result;
}
