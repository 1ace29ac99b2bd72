import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root folder. */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** One fenced code block of a Markdown file. */
export interface FencedBlock {
  /** Relative to the repository, e.g. "docs/operations.md". */
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The info string's first word, lower-cased ("" when the fence has none). */
  lang: string;
  /** The lines between the fences, the fence's indentation removed, ending with a newline. */
  body: string;
  /** The example file the block mirrors (`<!-- example: examples/<name>.mjs -->` just above the fence), or null. */
  mirrors: string | null;
}

/** README.md and every Markdown file under docs/: the documents whose code must run as written. */
export function documentFiles(): string[] {
  const found = ["README.md"];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith(".md")) found.push(path);
    }
  };
  walk("docs");
  return found.sort();
}

const MIRROR = /^<!--\s*example:\s*(\S+)\s*-->$/;

/** The fenced blocks of a Markdown text (``` or ~~~ fences, indented ones too, as CommonMark reads them). */
export function fencedBlocks(file: string, text: string = readFileSync(join(ROOT, file), "utf8")): FencedBlock[] {
  const lines = text.split("\n");
  const blocks: FencedBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, lang] = open as unknown as [string, string, string, string];
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(lines[j]!);
      if (close && close[1]![0] === fence[0] && close[1]!.length >= fence.length) break;
      body.push(lines[j]!.startsWith(indent) ? lines[j]!.slice(indent.length) : lines[j]!.trimStart());
    }
    let k = i - 1;
    while (k >= 0 && lines[k]!.trim() === "") k--;
    const marker = k >= 0 ? MIRROR.exec(lines[k]!.trim()) : null;
    blocks.push({
      file,
      line: i + 1,
      lang: lang.toLowerCase(),
      body: body.length > 0 ? `${body.join("\n")}\n` : "",
      mirrors: marker ? marker[1]! : null,
    });
    i = j;
  }
  return blocks;
}

/** Every fenced block of README.md and docs/. */
export function allBlocks(): FencedBlock[] {
  return documentFiles().flatMap((file) => fencedBlocks(file));
}

export const SHELL_LANGS = new Set(["sh", "shell", "bash", "console"]);

/** One simple command of a shell block: its text as written and its words (quotes removed). */
export interface ShellCommand {
  text: string;
  words: string[];
}

/**
 * The simple commands of a shell block, split where sh splits them (newlines, `&&`, `||`, `;`,
 * ` | `) outside quotes, `$(…)` and comments; a backslash-newline continues a line. Liberties for
 * usage synopses: a line that starts with blanks continues the command above it, and `|` inside
 * `[…]` or `(…)`, or between two characters of one word (`N|none`), is an alternative, not a pipe.
 */
export function shellCommands(block: string): ShellCommand[] {
  const commands: ShellCommand[] = [];
  let text = "";
  let words: string[] = [];
  let word = "";
  let inWord = false;
  let quote: "'" | '"' | null = null;
  let substitution = 0;
  let group = 0;
  const endWord = (): void => {
    if (inWord) words.push(word);
    word = "";
    inWord = false;
  };
  const endCommand = (): void => {
    endWord();
    if (words.length > 0) commands.push({ text: text.trim(), words });
    text = "";
    words = [];
    group = 0;
  };
  for (let i = 0; i < block.length; i++) {
    const c = block[i]!;
    const next = block[i + 1];
    if (quote) {
      text += c;
      if (c === quote) quote = null;
      else word += c;
      continue;
    }
    if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
      text += c;
      continue;
    }
    if (substitution > 0) {
      text += c;
      word += c;
      if (c === "(") substitution++;
      if (c === ")") substitution--;
      continue;
    }
    if (c === "$" && next === "(") {
      substitution = 1;
      inWord = true;
      word += "$(";
      text += "$(";
      i++;
      continue;
    }
    if (c === "\\" && next === "\n") {
      text += " ";
      endWord();
      i++;
      continue;
    }
    if (c === "#" && !inWord) {
      while (i + 1 < block.length && block[i + 1] !== "\n") i++;
      continue;
    }
    if ((c === "[" || c === "(") && !inWord) group++;
    if ((c === "]" || c === ")") && group > 0) group--;
    if (c === "\n") {
      const rest = block.slice(i + 1);
      if (group > 0 || (/^[ \t]/.test(rest) && rest.split("\n")[0]!.trim() !== "" && (words.length > 0 || inWord))) {
        text += " ";
        endWord();
        continue;
      }
      endCommand();
      continue;
    }
    const pipe = c === "|" && next !== "|" && !(inWord && next !== undefined && !/\s/.test(next));
    if (group === 0 && (c === ";" || pipe || (c === "|" && next === "|") || (c === "&" && next === "&"))) {
      if (next === c) i++;
      endCommand();
      continue;
    }
    if (c === " " || c === "\t") {
      text += c;
      endWord();
      continue;
    }
    text += c;
    word += c;
    inWord = true;
  }
  endCommand();
  return commands;
}

/** A path relative to the repository, for messages. */
export function repoPath(absolute: string): string {
  return relative(ROOT, absolute);
}
