//! What a `bash__exec` command runs, for the approval gate: every simple
//! command in it, with quotes and escapes removed, or the reason it cannot
//! be known before it runs.
//!
//! This is a deliberately narrow reader of POSIX `sh` (what `/bin/sh -c`
//! runs), not a shell: it accepts what it can analyse soundly and refuses
//! the rest ([`Unanalysable`]), and the gate treats a refusal as "gated".
//! It reads lists, pipelines, `&&`/`||`, `&`, subshells, brace groups,
//! `if`/`while`/`until`/`for` (their words are separators; a `for`
//! header's words are only searched for substitutions), single and double
//! quotes, backslashes, comments, redirections, here-documents, and the
//! commands inside `$(…)`, backticks and `<(…)`/`>(…)`. It sees through
//! the wrappers in [`WRAPPERS`] and `env`, `exec`, `command`, `builtin`,
//! `xargs`, `find -exec`, and `sh`/`bash`/`dash`/… `-c STRING`.
//!
//! It does not own the patterns people write (`goondan_config::approvals`)
//! nor the decision (the gate in the parent module).

use std::fmt;

/// How deep substitutions and `sh -c` strings may nest before the command
/// is refused: far beyond what anyone writes, short of any stack limit.
const MAX_DEPTH: usize = 16;

/// Directories whose commands are reduced to their basename for an allow
/// list (`/bin/ls` is `ls`); a command elsewhere (`./ls`) keeps its path,
/// since a file the agent wrote is not the system's `ls`.
const SYSTEM_DIRS: [&str; 6] = [
    "/bin",
    "/usr/bin",
    "/sbin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// Shells whose `-c STRING` is read as a command in its turn.
const SHELLS: [&str; 10] = [
    "sh", "bash", "dash", "ash", "ksh", "mksh", "lksh", "posh", "yash", "zsh",
];

/// Variables whose value changes what a command name runs or makes a
/// shell read a file: setting one makes a command unanalysable.
const SENSITIVE_VARIABLES: [&str; 10] = [
    "PATH",
    "IFS",
    "ENV",
    "BASH_ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "CDPATH",
    "GLOBIGNORE",
    "PROMPT_COMMAND",
];

/// Prefixes of such variables (the dynamic loader's, bash's exported
/// functions).
const SENSITIVE_PREFIXES: [&str; 3] = ["LD_", "DYLD_", "BASH_FUNC_"];

/// A command that runs another one given after its options: how to skip
/// them.
#[derive(Debug)]
struct Wrapper {
    /// The wrapper's name.
    name: &'static str,
    /// Options without a value.
    flags: &'static [&'static str],
    /// Options that take the next word (or `--opt=value`, `-oVALUE`).
    valued: &'static [&'static str],
    /// Operands between the options and the command (`timeout`'s
    /// duration, `chroot`'s directory).
    operands: usize,
    /// True when the wrapper also counts as a command itself, because it
    /// changes who or where the command runs as (`sudo`, `chroot`).
    counts_itself: bool,
}

/// The wrappers seen through, besides `env`, `exec`, `command`, `builtin`,
/// `xargs`, `find -exec` and the shells' `-c`. Any option not listed makes
/// the command unanalysable.
const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "nohup",
        flags: &[],
        valued: &[],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "nice",
        flags: &[],
        valued: &["-n", "--adjustment"],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "time",
        flags: &[
            "-p",
            "-v",
            "--verbose",
            "--portability",
            "-a",
            "--append",
            "-q",
            "--quiet",
        ],
        valued: &["-f", "--format", "-o", "--output"],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "timeout",
        flags: &["--preserve-status", "--foreground", "-v", "--verbose"],
        valued: &["-s", "--signal", "-k", "--kill-after"],
        operands: 1,
        counts_itself: false,
    },
    Wrapper {
        name: "stdbuf",
        flags: &[],
        valued: &["-i", "-o", "-e", "--input", "--output", "--error"],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "setsid",
        flags: &["-f", "--fork", "-w", "--wait", "-c", "--ctty"],
        valued: &[],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "ionice",
        flags: &["-t", "--ignore"],
        valued: &["-c", "--class", "-n", "--classdata"],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "busybox",
        flags: &[],
        valued: &[],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "builtin",
        flags: &[],
        valued: &[],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "exec",
        flags: &["-c", "-l"],
        valued: &["-a"],
        operands: 0,
        counts_itself: false,
    },
    Wrapper {
        name: "sudo",
        flags: &[
            "-E",
            "-H",
            "-n",
            "-S",
            "-k",
            "-P",
            "-A",
            "--preserve-env",
            "--non-interactive",
        ],
        valued: &[
            "-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "--host", "-p",
            "--prompt",
        ],
        operands: 0,
        counts_itself: true,
    },
    Wrapper {
        name: "doas",
        flags: &["-n"],
        valued: &["-u", "-C"],
        operands: 0,
        counts_itself: true,
    },
    Wrapper {
        name: "chroot",
        flags: &[],
        valued: &["--userspec", "--groups"],
        operands: 1,
        counts_itself: true,
    },
];

/// `xargs`'s options; `-I`, `-i` and `--replace` put the read words where
/// the command says instead of after it.
const XARGS: Wrapper = Wrapper {
    name: "xargs",
    flags: &[
        "-0",
        "--null",
        "-r",
        "--no-run-if-empty",
        "-t",
        "--verbose",
        "-x",
        "--exit",
        "-p",
        "--interactive",
        "-o",
        "--open-tty",
        "-i",
    ],
    valued: &[
        "-n",
        "--max-args",
        "-P",
        "--max-procs",
        "-L",
        "--max-lines",
        "-s",
        "--max-chars",
        "-d",
        "--delimiter",
        "-a",
        "--arg-file",
        "-E",
        "--eof",
        "-I",
        "--replace",
    ],
    operands: 0,
    counts_itself: false,
};

/// The word `xargs CMD ARGS` gets after `ARGS`: what it reads from its
/// input, unknown here.
pub(crate) const XARGS_INPUT: &str = "…";

/// One simple command the shell would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    /// The command name: the basename for a command in a system directory
    /// (`/bin/rm` is `rm`), else as written (`./rm`); empty for a command
    /// of redirections only (`> file`).
    pub(crate) name: String,
    /// The name's basename, whatever its directory.
    pub(crate) basename: String,
    /// The arguments, quotes and escapes removed; an expansion stays as
    /// written (`$HOME`, `$(date)`).
    pub(crate) args: Vec<String>,
    /// Output redirections to files (`>out.txt`, `2>>log`); input ones,
    /// descriptor copies (`2>&1`) and `/dev/null` are left out.
    pub(crate) redirects: Vec<String>,
}

impl SimpleCommand {
    /// Name, arguments and redirections joined by one space: what an
    /// allow-list pattern matches.
    pub(crate) fn text(&self) -> String {
        join(&self.name, &self.args, &self.redirects)
    }

    /// What a deny-list pattern matches: [`SimpleCommand::text`], and the
    /// same with the name's basename when it differs (`./rm x` is also
    /// `rm x`).
    pub(crate) fn deny_texts(&self) -> Vec<String> {
        let mut texts = vec![self.text()];
        if self.basename != self.name {
            texts.push(join(&self.basename, &self.args, &self.redirects));
        }
        texts
    }
}

fn join(name: &str, args: &[String], redirects: &[String]) -> String {
    std::iter::once(name)
        .chain(args.iter().map(String::as_str))
        .chain(redirects.iter().map(String::as_str))
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why what a command runs cannot be known before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unanalysable {
    /// Not valid shell, as far as this reader goes.
    Syntax(&'static str),
    /// The command name holds an expansion (`$X`, `$(echo rm)`).
    DynamicName(String),
    /// The command name is a pattern (`/bin/r?`, `{rm,x}`).
    PatternName(String),
    /// `eval`, `.`, `source`, `alias`, `trap`, `hash -p`: code from a
    /// string or a file, or a name bound to other code.
    Indirect(String),
    /// A function definition.
    Function,
    /// `case`, `select`, `function`, `coproc`, `((…))`.
    Construct(&'static str),
    /// `$((…))`: bash may run commands from an arithmetic expression.
    Arithmetic,
    /// A `${…}` beyond a plain name with a plain default.
    ParameterExpansion(String),
    /// `$'…'` or `$"…"`, which `sh` and `bash` read differently.
    DollarQuote,
    /// An unquoted here-document whose body holds an expansion.
    HereDocument,
    /// It sets a variable that changes what runs (`PATH`, `LD_PRELOAD`).
    Environment(String),
    /// A shell started on a script file or its input, not `-c STRING`.
    ShellScript(String),
    /// A word a wrapper or a shell reads as an option or a command is not
    /// literal, or is an option this reader does not know.
    WrapperWord {
        /// The wrapper (`env`, `sudo`, `bash`).
        wrapper: String,
        /// The word.
        word: String,
    },
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl fmt::Display for Unanalysable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unanalysable::Syntax(what) => write!(f, "it does not parse ({what})"),
            Unanalysable::DynamicName(name) => {
                write!(f, "the command name `{name}` is only known when it runs")
            }
            Unanalysable::PatternName(name) => {
                write!(
                    f,
                    "the command name `{name}` is a pattern the shell expands"
                )
            }
            Unanalysable::Indirect(name) => {
                write!(f, "`{name}` runs code the gate cannot read")
            }
            Unanalysable::Function => write!(f, "it defines a function"),
            Unanalysable::Construct(what) => write!(f, "`{what}` is not analysed"),
            Unanalysable::Arithmetic => write!(f, "arithmetic `$((…))` is not analysed"),
            Unanalysable::ParameterExpansion(text) => {
                write!(f, "the expansion `{text}` is not analysed")
            }
            Unanalysable::DollarQuote => {
                write!(f, "`$'…'` and `$\"…\"` are read differently by sh and bash")
            }
            Unanalysable::HereDocument => {
                write!(f, "an unquoted here-document holds an expansion")
            }
            Unanalysable::Environment(name) => {
                write!(f, "it sets {name}, which changes what runs")
            }
            Unanalysable::ShellScript(shell) => {
                write!(f, "`{shell}` runs a script the gate cannot read")
            }
            Unanalysable::WrapperWord { wrapper, word } => {
                write!(f, "`{wrapper}` is given `{word}`, which is not analysed")
            }
            Unanalysable::TooDeep => write!(f, "it nests too deep"),
        }
    }
}

/// Every simple command `source` runs, in the order they appear (those
/// inside a substitution before the command holding it), or why that
/// cannot be known.
pub(crate) fn analyse(source: &str) -> Result<Vec<SimpleCommand>, Unanalysable> {
    let mut commands = Vec::new();
    analyse_into(source, 0, &mut commands)?;
    Ok(commands)
}

fn analyse_into(
    source: &str,
    depth: usize,
    out: &mut Vec<SimpleCommand>,
) -> Result<(), Unanalysable> {
    if depth > MAX_DEPTH {
        return Err(Unanalysable::TooDeep);
    }
    let chars: Vec<char> = source.chars().collect();
    let mut parser = Parser {
        chars: &chars,
        pos: 0,
        depth,
        out,
        here_documents: Vec::new(),
    };
    parser.list(false)
}

/// True for a shell variable name.
fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Refuses a variable whose value changes what runs.
pub(crate) fn check_variable(name: &str) -> Result<(), Unanalysable> {
    let sensitive = !is_name(name)
        || SENSITIVE_VARIABLES.contains(&name)
        || SENSITIVE_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix));
    if sensitive {
        return Err(Unanalysable::Environment(name.to_string()));
    }
    Ok(())
}

/// One word after quote removal.
#[derive(Debug, Clone, Default)]
struct Word {
    /// The text, quotes and escapes removed, expansions as written.
    text: String,
    /// Holds an expansion.
    dynamic: bool,
    /// Holds an unquoted pattern (`*`, `?`, `[…]`) or brace expansion.
    pattern: bool,
    /// Holds quoting or escaping.
    quoted: bool,
    /// The name of an unquoted leading `NAME=`.
    assignment: Option<String>,
}

impl Word {
    fn literal(text: &str) -> Word {
        Word {
            text: text.to_string(),
            ..Word::default()
        }
    }

    /// True for a word a reserved word can be: no quotes, no expansions.
    fn is_plain(&self, text: &str) -> bool {
        !self.quoted && !self.dynamic && self.text == text
    }
}

/// A here-document waiting for the end of its line.
#[derive(Debug)]
struct HereDocument {
    delimiter: String,
    quoted: bool,
    strip_tabs: bool,
}

/// Where a `for` header is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ForHeader {
    /// After `for`.
    Name,
    /// After its name.
    In,
    /// In its word list.
    Words,
}

/// The simple command being read.
#[derive(Debug, Default)]
struct Pending {
    words: Vec<Word>,
    redirects: Vec<String>,
    for_header: Option<ForHeader>,
}

struct Parser<'s, 'o> {
    chars: &'s [char],
    pos: usize,
    depth: usize,
    out: &'o mut Vec<SimpleCommand>,
    here_documents: Vec<HereDocument>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn source(&self, from: usize) -> String {
        self.chars[from..self.pos].iter().collect()
    }

    /// Reads commands up to the end of the input or, in a substitution,
    /// up to its `)`.
    fn list(&mut self, in_substitution: bool) -> Result<(), Unanalysable> {
        let mut pending = Pending::default();
        let mut subshells = 0usize;
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\\' if self.peek_at(1) == Some('\n') => self.pos += 2,
                '\n' => {
                    self.pos += 1;
                    self.end_command(&mut pending)?;
                    self.read_here_documents()?;
                }
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                ';' => {
                    if self.peek_at(1) == Some(';') {
                        return Err(Unanalysable::Construct("case"));
                    }
                    self.pos += 1;
                    self.end_command(&mut pending)?;
                }
                '&' if self.peek_at(1) == Some('>') => self.redirect(None, &mut pending)?,
                '&' | '|' => {
                    self.pos += 1;
                    if self.peek() == Some(c) {
                        self.pos += 1;
                    }
                    self.end_command(&mut pending)?;
                }
                '(' => {
                    if !pending.words.is_empty() || !pending.redirects.is_empty() {
                        return Err(if pending.words.len() == 1 {
                            Unanalysable::Function
                        } else {
                            Unanalysable::Syntax("`(` in the middle of a command")
                        });
                    }
                    if self.peek_at(1) == Some('(') {
                        return Err(Unanalysable::Construct("((…))"));
                    }
                    self.pos += 1;
                    subshells += 1;
                }
                ')' => {
                    self.pos += 1;
                    self.end_command(&mut pending)?;
                    if subshells > 0 {
                        subshells -= 1;
                    } else if in_substitution {
                        return Ok(());
                    } else {
                        return Err(Unanalysable::Syntax("an unmatched `)`"));
                    }
                }
                '<' | '>' if self.peek_at(1) != Some('(') => self.redirect(None, &mut pending)?,
                _ => {
                    let word = self.word()?;
                    let io_number = !word.quoted
                        && !word.dynamic
                        && !word.text.is_empty()
                        && word.text.chars().all(|c| c.is_ascii_digit())
                        && matches!(self.peek(), Some('<' | '>'))
                        && self.peek_at(1) != Some('(');
                    if io_number {
                        self.redirect(Some(word.text), &mut pending)?;
                    } else {
                        self.command_word(word, &mut pending)?;
                    }
                }
            }
        }
        self.end_command(&mut pending)?;
        if in_substitution {
            return Err(Unanalysable::Syntax("an unterminated `$(`"));
        }
        if subshells > 0 {
            return Err(Unanalysable::Syntax("an unterminated `(`"));
        }
        Ok(())
    }

    /// Places a word: a reserved word, part of a `for` header, or a word
    /// of the simple command.
    fn command_word(&mut self, word: Word, pending: &mut Pending) -> Result<(), Unanalysable> {
        match pending.for_header {
            Some(ForHeader::Name) => {
                if word.quoted || word.dynamic || !is_name(&word.text) {
                    return Err(Unanalysable::Syntax("`for` without a variable name"));
                }
                pending.for_header = Some(ForHeader::In);
                return Ok(());
            }
            Some(ForHeader::In) => {
                if !word.is_plain("in") {
                    return Err(Unanalysable::Construct("for … do"));
                }
                pending.for_header = Some(ForHeader::Words);
                return Ok(());
            }
            // The words of `for x in WORDS` are values, not commands; a
            // substitution in them was read with the word.
            Some(ForHeader::Words) => return Ok(()),
            None => {}
        }
        if pending.words.is_empty() && !word.quoted && !word.dynamic {
            match word.text.as_str() {
                "if" | "then" | "elif" | "else" | "fi" | "do" | "done" | "while" | "until"
                | "{" | "}" | "!" => return Ok(()),
                "for" => {
                    pending.for_header = Some(ForHeader::Name);
                    return Ok(());
                }
                "case" => return Err(Unanalysable::Construct("case")),
                "select" => return Err(Unanalysable::Construct("select")),
                "function" => return Err(Unanalysable::Function),
                "coproc" => return Err(Unanalysable::Construct("coproc")),
                _ => {}
            }
        }
        pending.words.push(word);
        Ok(())
    }

    /// Reads a redirection at `<`, `>` or `&>`, with its target.
    fn redirect(
        &mut self,
        io_number: Option<String>,
        pending: &mut Pending,
    ) -> Result<(), Unanalysable> {
        const OPERATORS: [&str; 12] = [
            "&>>", "&>", "<<<", "<<-", "<<", "<>", "<&", ">>", ">|", ">&", "<", ">",
        ];
        let operator = OPERATORS
            .iter()
            .find(|operator| {
                operator
                    .chars()
                    .enumerate()
                    .all(|(offset, c)| self.peek_at(offset) == Some(c))
            })
            .copied()
            .ok_or(Unanalysable::Syntax("a redirection"))?;
        self.pos += operator.chars().count();
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        if self
            .peek()
            .is_none_or(|c| matches!(c, '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>'))
        {
            return Err(Unanalysable::Syntax("a redirection without a target"));
        }
        let target = self.word()?;
        match operator {
            "<<" | "<<-" => self.here_documents.push(HereDocument {
                delimiter: target.text,
                quoted: target.quoted,
                strip_tabs: operator == "<<-",
            }),
            "<" | "<<<" | "<&" => {}
            ">&" if target.text == "-" || target.text.chars().all(|c| c.is_ascii_digit()) => {}
            _ if target.text == "/dev/null" => {}
            _ => pending.redirects.push(format!(
                "{}{operator}{}",
                io_number.unwrap_or_default(),
                target.text
            )),
        }
        Ok(())
    }

    /// After a newline: the bodies of the here-documents of that line.
    fn read_here_documents(&mut self) -> Result<(), Unanalysable> {
        for document in std::mem::take(&mut self.here_documents) {
            // A body cut by the end of the input ends there, as in dash.
            while self.pos < self.chars.len() {
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                let line = self.source(start);
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                let compared = if document.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if compared == document.delimiter {
                    break;
                }
                if !document.quoted && (line.contains('$') || line.contains('`')) {
                    return Err(Unanalysable::HereDocument);
                }
            }
        }
        Ok(())
    }

    /// Reads one word, reading the commands of its substitutions into
    /// the output as it goes.
    fn word(&mut self) -> Result<Word, Unanalysable> {
        let mut word = Word::default();
        let mut bracket_open = false;
        let mut brace_open = false;
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' => break,
                '<' | '>' => {
                    if self.peek_at(1) != Some('(') {
                        break;
                    }
                    // Process substitution (bash): its commands run.
                    let start = self.pos;
                    self.pos += 2;
                    self.substitution()?;
                    self.expansion(&mut word, start);
                }
                '\\' => {
                    self.pos += 1;
                    word.quoted = true;
                    match self.peek() {
                        None => word.text.push('\\'),
                        Some('\n') => self.pos += 1,
                        Some(escaped) => {
                            word.text.push(escaped);
                            self.pos += 1;
                        }
                    }
                }
                '\'' => {
                    self.pos += 1;
                    word.quoted = true;
                    loop {
                        match self.peek() {
                            None => return Err(Unanalysable::Syntax("an unterminated `'`")),
                            Some('\'') => break,
                            Some(quoted) => word.text.push(quoted),
                        }
                        self.pos += 1;
                    }
                    self.pos += 1;
                }
                '"' => self.double_quoted(&mut word)?,
                '$' => self.dollar(&mut word, false)?,
                '`' => self.backticks(&mut word, false)?,
                _ => {
                    match c {
                        '*' | '?' => word.pattern = true,
                        '[' => bracket_open = true,
                        ']' if bracket_open => word.pattern = true,
                        '{' => brace_open = true,
                        '}' if brace_open => word.pattern = true,
                        '=' if word.assignment.is_none()
                            && !word.quoted
                            && !word.dynamic
                            && is_name(&word.text) =>
                        {
                            word.assignment = Some(word.text.clone());
                        }
                        _ => {}
                    }
                    word.text.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(word)
    }

    fn expansion(&self, word: &mut Word, start: usize) {
        word.dynamic = true;
        word.text.push_str(&self.source(start));
    }

    /// Reads the commands of a `$(…)` or `<(…)` whose `(` was just read.
    fn substitution(&mut self) -> Result<(), Unanalysable> {
        if !self.here_documents.is_empty() {
            return Err(Unanalysable::Construct(
                "a substitution after `<<` on its line",
            ));
        }
        if self.depth >= MAX_DEPTH {
            return Err(Unanalysable::TooDeep);
        }
        self.depth += 1;
        let read = self.list(true);
        self.depth -= 1;
        read
    }

    fn double_quoted(&mut self, word: &mut Word) -> Result<(), Unanalysable> {
        self.pos += 1;
        word.quoted = true;
        loop {
            match self.peek() {
                None => return Err(Unanalysable::Syntax("an unterminated `\"`")),
                Some('"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(escaped @ ('$' | '`' | '"' | '\\')) => {
                            word.text.push(escaped);
                            self.pos += 1;
                        }
                        Some('\n') => self.pos += 1,
                        _ => word.text.push('\\'),
                    }
                }
                Some('$') => self.dollar(word, true)?,
                Some('`') => self.backticks(word, true)?,
                Some(c) => {
                    word.text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// At a `$`: an expansion, or a plain `$`.
    fn dollar(&mut self, word: &mut Word, in_double_quotes: bool) -> Result<(), Unanalysable> {
        let start = self.pos;
        self.pos += 1;
        match self.peek() {
            Some('(') => {
                if self.peek_at(1) == Some('(') {
                    return Err(Unanalysable::Arithmetic);
                }
                self.pos += 1;
                self.substitution()?;
                self.expansion(word, start);
            }
            Some('{') => {
                self.pos += 1;
                let inner_start = self.pos;
                while self.peek().is_some_and(|c| c != '}') {
                    self.pos += 1;
                }
                if self.peek().is_none() {
                    return Err(Unanalysable::Syntax("an unterminated `${`"));
                }
                let inner = self.source(inner_start);
                self.pos += 1;
                // A plain name, maybe with an operator and a plain word
                // (`${HOME}`, `${name:-x}`); anything that could run or
                // nest is refused.
                let plain = !inner.is_empty()
                    && !inner.starts_with('!')
                    && !inner.chars().any(|c| {
                        matches!(c, '$' | '`' | '(' | ')' | '@' | '\'' | '"' | '\\' | '{')
                    });
                if !plain {
                    return Err(Unanalysable::ParameterExpansion(self.source(start)));
                }
                self.expansion(word, start);
            }
            Some('\'' | '"') if !in_double_quotes => return Err(Unanalysable::DollarQuote),
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    self.pos += 1;
                }
                self.expansion(word, start);
            }
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => {
                self.pos += 1;
                self.expansion(word, start);
            }
            _ => word.text.push('$'),
        }
        Ok(())
    }

    /// At a backtick: the old command substitution, read as its own
    /// command after the backslashes it consumes.
    fn backticks(&mut self, word: &mut Word, in_double_quotes: bool) -> Result<(), Unanalysable> {
        let start = self.pos;
        self.pos += 1;
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => return Err(Unanalysable::Syntax("an unterminated backtick")),
                Some('`') => break,
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(escaped @ ('$' | '`' | '\\')) => inner.push(escaped),
                        Some('"') if in_double_quotes => inner.push('"'),
                        Some('\n') => {}
                        Some(other) => {
                            inner.push('\\');
                            inner.push(other);
                        }
                        None => return Err(Unanalysable::Syntax("an unterminated backtick")),
                    }
                }
                Some(c) => inner.push(c),
            }
            self.pos += 1;
        }
        self.pos += 1;
        analyse_into(&inner, self.depth + 1, self.out)?;
        self.expansion(word, start);
        Ok(())
    }

    /// At a separator: the simple command read so far, if any.
    fn end_command(&mut self, pending: &mut Pending) -> Result<(), Unanalysable> {
        let words = std::mem::take(&mut pending.words);
        let redirects = std::mem::take(&mut pending.redirects);
        pending.for_header = None;
        let mut rest = words.as_slice();
        while let Some((first, after)) = rest.split_first() {
            let Some(name) = &first.assignment else { break };
            check_variable(name)?;
            rest = after;
        }
        if rest.is_empty() {
            // Assignments alone run nothing; redirections alone still
            // create or truncate their files.
            if !redirects.is_empty() {
                self.out.push(SimpleCommand {
                    name: String::new(),
                    basename: String::new(),
                    args: Vec::new(),
                    redirects,
                });
            }
            return Ok(());
        }
        self.command(rest, &redirects)
    }

    /// A simple command's words (assignments removed): sees through
    /// wrappers and shells, refuses what it cannot read, records the rest.
    fn command(&mut self, words: &[Word], redirects: &[String]) -> Result<(), Unanalysable> {
        let Some((name_word, args)) = words.split_first() else {
            return Ok(());
        };
        if name_word.dynamic {
            return Err(Unanalysable::DynamicName(name_word.text.clone()));
        }
        if name_word.pattern {
            return Err(Unanalysable::PatternName(name_word.text.clone()));
        }
        let (name, basename) = normalize(&name_word.text);
        match name.as_str() {
            "eval" | "." | "source" | "alias" => return Err(Unanalysable::Indirect(name)),
            "trap" if !args.is_empty() => return Err(Unanalysable::Indirect(name)),
            "hash" if args.iter().any(|arg| arg.text.starts_with("-p")) => {
                return Err(Unanalysable::Indirect(name))
            }
            "export" | "readonly" | "declare" | "typeset" | "local" => {
                for arg in args {
                    if let Some((variable, _)) = arg.text.split_once('=') {
                        check_variable(variable)?;
                    }
                }
            }
            "env" => return self.env(args, redirects),
            "xargs" => return self.xargs(args, redirects),
            "command" => {
                let options = args
                    .iter()
                    .take_while(|arg| arg.text.starts_with('-'))
                    .collect::<Vec<_>>();
                let only_looks_up = options
                    .iter()
                    .any(|arg| arg.text.contains('v') || arg.text.contains('V'));
                if !only_looks_up {
                    for option in &options {
                        if !matches!(option.text.as_str(), "-p" | "--") {
                            return Err(wrapper_word(&name, option));
                        }
                    }
                    if options.len() < args.len() {
                        return self.command(&args[options.len()..], redirects);
                    }
                }
            }
            "find" => {
                self.record(name, basename, args, redirects);
                return self.find_exec(args);
            }
            shell if SHELLS.contains(&shell) => return self.shell(&name, args),
            _ => {}
        }
        if let Some(wrapper) = WRAPPERS.iter().find(|wrapper| wrapper.name == name) {
            if let Some(start) = skip_options(wrapper, args)? {
                if wrapper.counts_itself {
                    self.record(name, basename, args, redirects);
                }
                return self.command(&args[start..], redirects);
            }
        }
        self.record(name, basename, args, redirects);
        Ok(())
    }

    fn record(&mut self, name: String, basename: String, args: &[Word], redirects: &[String]) {
        self.out.push(SimpleCommand {
            name,
            basename,
            args: args.iter().map(|arg| arg.text.clone()).collect(),
            redirects: redirects.to_vec(),
        });
    }

    /// `env [OPTIONS] [NAME=VALUE]... [COMMAND [ARGS]]`.
    fn env(&mut self, args: &[Word], redirects: &[String]) -> Result<(), Unanalysable> {
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            if arg.dynamic {
                return Err(wrapper_word("env", arg));
            }
            let text = arg.text.as_str();
            match text {
                "--" => {
                    index += 1;
                    break;
                }
                "-i" | "-" | "-0" | "--null" | "--ignore-environment" => index += 1,
                "-u" | "--unset" | "-C" | "--chdir" => index += 2,
                _ if text.starts_with("--unset=") || text.starts_with("--chdir=") => index += 1,
                _ if (text.starts_with("-u") || text.starts_with("-C")) && text.len() > 2 => {
                    index += 1
                }
                _ if text.starts_with('-') => return Err(wrapper_word("env", arg)),
                _ => break,
            }
        }
        // env takes `NAME=VALUE` however it was quoted.
        while let Some(arg) = args.get(index) {
            let Some((variable, _)) = arg.text.split_once('=') else {
                break;
            };
            if arg.dynamic {
                return Err(wrapper_word("env", arg));
            }
            check_variable(variable)?;
            index += 1;
        }
        if index >= args.len() {
            self.record("env".into(), "env".into(), args, redirects);
            return Ok(());
        }
        self.command(&args[index..], redirects)
    }

    /// `xargs [OPTIONS] [COMMAND [ARGS]]`: the command with what xargs
    /// reads after its arguments ([`XARGS_INPUT`]), or in place of the
    /// `-I` string.
    fn xargs(&mut self, args: &[Word], redirects: &[String]) -> Result<(), Unanalysable> {
        let start = skip_options(&XARGS, args)?.unwrap_or(args.len());
        let replaces = args[..start].iter().any(|arg| {
            arg.text.starts_with("-I")
                || arg.text.starts_with("-i")
                || arg.text.starts_with("--replace")
        });
        let mut command: Vec<Word> = args[start..].to_vec();
        if command.is_empty() {
            command.push(Word::literal("echo"));
        }
        if !replaces {
            command.push(Word::literal(XARGS_INPUT));
        }
        self.command(&command, redirects)
    }

    /// The commands of `find … -exec CMD ARGS ;` (and `-execdir`, `-ok`,
    /// `-okdir`, ending with `;` or `+`).
    fn find_exec(&mut self, args: &[Word]) -> Result<(), Unanalysable> {
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            index += 1;
            if !matches!(arg.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                continue;
            }
            let start = index;
            let end = args[start..]
                .iter()
                .position(|arg| arg.text == ";" || arg.text == "+")
                .map(|offset| start + offset)
                .ok_or(Unanalysable::Syntax("`find -exec` without `;` or `+`"))?;
            if end == start {
                return Err(Unanalysable::Syntax("`find -exec` without a command"));
            }
            self.command(&args[start..end], &[])?;
            index = end + 1;
        }
        Ok(())
    }

    /// `sh [OPTIONS] -c STRING [NAME [ARGS]]`: STRING is read in its turn;
    /// a shell on a file or its input is refused.
    fn shell(&mut self, shell: &str, args: &[Word]) -> Result<(), Unanalysable> {
        let mut index = 0;
        let mut has_command = false;
        while let Some(arg) = args.get(index) {
            if arg.dynamic {
                return Err(wrapper_word(shell, arg));
            }
            let text = arg.text.as_str();
            if text == "--" || text == "-" {
                index += 1;
                break;
            }
            if text.starts_with("--") {
                if !matches!(text, "--norc" | "--noprofile" | "--posix" | "--noediting") {
                    return Err(wrapper_word(shell, arg));
                }
                index += 1;
                continue;
            }
            let Some(letters) = text.strip_prefix('-').or_else(|| text.strip_prefix('+')) else {
                break;
            };
            index += 1;
            for letter in letters.chars() {
                match letter {
                    'c' => has_command = true,
                    // `-o NAME` takes the next word.
                    'o' => index += 1,
                    'e' | 'u' | 'x' | 'v' | 'f' | 'n' | 'a' | 'b' | 'h' | 'm' | 'C' | 'B' | 'E'
                    | 'H' | 'P' | 'T' => {}
                    // `-i`, `-l` read profiles and rc files; `-s` reads
                    // commands from the input: none of that is visible here.
                    _ => return Err(wrapper_word(shell, arg)),
                }
            }
        }
        if !has_command {
            return Err(Unanalysable::ShellScript(shell.to_string()));
        }
        let script = args
            .get(index)
            .ok_or(Unanalysable::Syntax("`-c` without a command"))?;
        if script.dynamic {
            return Err(wrapper_word(shell, script));
        }
        analyse_into(&script.text, self.depth + 1, self.out)
    }
}

fn wrapper_word(wrapper: &str, word: &Word) -> Unanalysable {
    Unanalysable::WrapperWord {
        wrapper: wrapper.to_string(),
        word: word.text.clone(),
    }
}

/// Where the command after a wrapper's options (and operands) starts;
/// `None` when there is none. An unknown option or a non-literal word
/// among them is refused.
fn skip_options(wrapper: &Wrapper, args: &[Word]) -> Result<Option<usize>, Unanalysable> {
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        if arg.dynamic {
            return Err(wrapper_word(wrapper.name, arg));
        }
        let text = arg.text.as_str();
        if text == "--" {
            index += 1;
            break;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        let long_with_value = text
            .split_once('=')
            .is_some_and(|(key, _)| key.starts_with("--") && wrapper.valued.contains(&key));
        let short_with_value = !text.starts_with("--")
            && text
                .get(..2)
                .is_some_and(|short| text.len() > 2 && wrapper.valued.contains(&short));
        let nice_number = wrapper.name == "nice" && text[1..].chars().all(|c| c.is_ascii_digit());
        if wrapper.flags.contains(&text) || long_with_value || short_with_value || nice_number {
            index += 1;
        } else if wrapper.valued.contains(&text) {
            index += 2;
        } else {
            return Err(wrapper_word(wrapper.name, arg));
        }
    }
    let start = index + wrapper.operands;
    Ok((start < args.len()).then_some(start))
}

/// The name to match and its basename: a command in a system directory
/// is its basename.
fn normalize(written: &str) -> (String, String) {
    match written.rsplit_once('/') {
        None => (written.to_string(), written.to_string()),
        Some((directory, basename)) if SYSTEM_DIRS.contains(&directory) => {
            (basename.to_string(), basename.to_string())
        }
        Some((_, basename)) => (written.to_string(), basename.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts of the commands `source` runs, or the refusal.
    fn texts(source: &str) -> Result<Vec<String>, Unanalysable> {
        analyse(source).map(|commands| commands.iter().map(SimpleCommand::text).collect())
    }

    #[test]
    fn reads_every_simple_command() {
        let cases: &[(&str, &[&str])] = &[
            ("ls", &["ls"]),
            ("ls -la /tmp", &["ls -la /tmp"]),
            ("rm\tx", &["rm x"]),
            ("/bin/rm x", &["rm x"]),
            ("/usr/bin/env", &["env"]),
            ("./rm x", &["./rm x"]),
            ("true; rm x", &["true", "rm x"]),
            ("true && rm x || echo no", &["true", "rm x", "echo no"]),
            ("ls | grep a | wc -l", &["ls", "grep a", "wc -l"]),
            ("sleep 1 & rm x", &["sleep 1", "rm x"]),
            ("(cd /tmp; rm x)", &["cd /tmp", "rm x"]),
            ("{ rm x; }", &["rm x"]),
            (
                "if true; then rm x; else echo y; fi",
                &["true", "rm x", "echo y"],
            ),
            ("while read a; do rm \"$a\"; done", &["read a", "rm $a"]),
            ("for f in a b; do rm $f; done", &["rm $f"]),
            ("for f in $(ls); do echo $f; done", &["ls", "echo $f"]),
            ("! rm x", &["rm x"]),
            ("\"rm\" x", &["rm x"]),
            ("'rm' 'a b'", &["rm a b"]),
            ("r\\m x", &["rm x"]),
            ("r\"\"m x", &["rm x"]),
            ("echo 'a;b' \"c|d\"", &["echo a;b c|d"]),
            ("echo \"\\$HOME \\\"q\\\"\"", &["echo $HOME \"q\""]),
            ("echo a\\\nb", &["echo ab"]),
            ("ls\nrm x\n", &["ls", "rm x"]),
            ("ls # rm x", &["ls"]),
            ("echo a#b", &["echo a#b"]),
            ("echo $(rm x)", &["rm x", "echo $(rm x)"]),
            ("echo \"$(rm x)\"", &["rm x", "echo $(rm x)"]),
            ("echo `rm x`", &["rm x", "echo `rm x`"]),
            ("echo \"`rm \\\"x\\\"`\"", &["rm x", "echo `rm \\\"x\\\"`"]),
            (
                "echo $(echo $(rm x))",
                &["rm x", "echo $(rm x)", "echo $(echo $(rm x))"],
            ),
            ("echo $( (rm x) )", &["rm x", "echo $( (rm x) )"]),
            (
                "diff <(ls a) <(ls b)",
                &["ls a", "ls b", "diff <(ls a) <(ls b)"],
            ),
            ("X=1 rm x", &["rm x"]),
            ("X=$(rm y)", &["rm y"]),
            ("X=1", &[]),
            ("echo x > out.txt", &["echo x >out.txt"]),
            ("echo x 2>>log 2>&1 >/dev/null", &["echo x 2>>log"]),
            ("echo x>out", &["echo x >out"]),
            ("cat < in", &["cat"]),
            ("> empty", &[">empty"]),
            ("cat <<EOF\nrm x\nEOF\nls", &["cat", "ls"]),
            ("cat <<'EOF'\n$(rm x)\nEOF", &["cat"]),
            ("cat <<-EOF\n\thello\n\tEOF\nls", &["cat", "ls"]),
            (
                "echo $HOME ${USER} ${X:-y} $1 $@",
                &["echo $HOME ${USER} ${X:-y} $1 $@"],
            ),
            ("echo $ a", &["echo $ a"]),
            ("[ -f x ] && rm x", &["[ -f x ]", "rm x"]),
            ("rm *.txt", &["rm *.txt"]),
            ("echo {a,b}", &["echo {a,b}"]),
            ("", &[]),
        ];
        for (source, expected) in cases {
            assert_eq!(
                texts(source),
                Ok(expected.iter().map(|text| text.to_string()).collect()),
                "{source:?}"
            );
        }
    }

    #[test]
    fn sees_through_wrappers_and_shells() {
        let cases: &[(&str, &[&str])] = &[
            ("bash -c 'rm x'", &["rm x"]),
            ("sh -c \"rm x; ls\"", &["rm x", "ls"]),
            ("/bin/dash -ec 'rm x'", &["rm x"]),
            ("bash -o pipefail -c 'rm x | cat'", &["rm x", "cat"]),
            ("sh -c 'sh -c \"rm x\"'", &["rm x"]),
            ("sh -c 'rm \"$1\"' _ x", &["rm $1"]),
            ("env rm x", &["rm x"]),
            ("env -i FOO=1 rm x", &["rm x"]),
            ("env -u HOME -- rm x", &["rm x"]),
            ("env", &["env"]),
            ("exec rm x", &["rm x"]),
            ("nohup rm x &", &["rm x"]),
            ("nice -n 5 rm x", &["rm x"]),
            ("nice -10 rm x", &["rm x"]),
            ("timeout -s KILL 5 rm x", &["rm x"]),
            ("timeout --signal=KILL 5s rm x", &["rm x"]),
            ("stdbuf -oL rm x", &["rm x"]),
            ("time -p rm x", &["rm x"]),
            ("command rm x", &["rm x"]),
            ("command -v rm", &["command -v rm"]),
            ("builtin echo x", &["echo x"]),
            ("busybox rm x", &["rm x"]),
            ("sudo -u root rm x", &["sudo -u root rm x", "rm x"]),
            ("chroot /srv rm x", &["chroot /srv rm x", "rm x"]),
            ("nohup env sh -c 'rm x'", &["rm x"]),
            ("xargs rm", &["rm …"]),
            ("xargs -0 -n 1 rm -f", &["rm -f …"]),
            ("xargs -I{} rm {}", &["rm {}"]),
            ("xargs", &["echo …"]),
            (
                "find . -name x -exec rm {} \\;",
                &["find . -name x -exec rm {} ;", "rm {}"],
            ),
            (
                "find . -execdir rm {} + -ok ls ';'",
                &["find . -execdir rm {} + -ok ls ;", "rm {}", "ls"],
            ),
            ("find . -name x -delete", &["find . -name x -delete"]),
            ("unlink x", &["unlink x"]),
        ];
        for (source, expected) in cases {
            assert_eq!(
                texts(source),
                Ok(expected.iter().map(|text| text.to_string()).collect()),
                "{source:?}"
            );
        }
    }

    #[test]
    fn refuses_what_it_cannot_know() {
        use Unanalysable as U;
        let wrapper = |wrapper: &str, word: &str| U::WrapperWord {
            wrapper: wrapper.into(),
            word: word.into(),
        };
        let cases: Vec<(&str, Unanalysable)> = vec![
            ("$(echo rm) x", U::DynamicName("$(echo rm)".into())),
            ("`echo rm` x", U::DynamicName("`echo rm`".into())),
            ("$X args", U::DynamicName("$X".into())),
            ("${cmd} x", U::DynamicName("${cmd}".into())),
            ("\"$X\" x", U::DynamicName("$X".into())),
            ("ls; $X", U::DynamicName("$X".into())),
            ("/bin/r? x", U::PatternName("/bin/r?".into())),
            ("/bin/r[m] x", U::PatternName("/bin/r[m]".into())),
            ("{rm,x}", U::PatternName("{rm,x}".into())),
            ("eval 'rm x'", U::Indirect("eval".into())),
            (". ./script.sh", U::Indirect(".".into())),
            ("source x", U::Indirect("source".into())),
            ("alias ls=rm", U::Indirect("alias".into())),
            ("trap 'rm x' EXIT", U::Indirect("trap".into())),
            ("hash -p /tmp/evil ls", U::Indirect("hash".into())),
            ("f() { rm x; }; f", U::Function),
            ("function f { rm x; }", U::Function),
            ("case x in x) rm x;; esac", U::Construct("case")),
            ("((x = 1))", U::Construct("((…))")),
            ("for f do rm $f; done", U::Construct("for … do")),
            ("echo $((1 + 2))", U::Arithmetic),
            (
                "echo ${x:-$(rm y)}",
                U::ParameterExpansion("${x:-$(rm y)}".into()),
            ),
            ("echo ${!name}", U::ParameterExpansion("${!name}".into())),
            ("echo $'\\x72m'", U::DollarQuote),
            ("cat <<EOF\n$(rm x)\nEOF", U::HereDocument),
            ("PATH=/tmp ls", U::Environment("PATH".into())),
            ("LD_PRELOAD=x.so ls", U::Environment("LD_PRELOAD".into())),
            ("export PATH=.", U::Environment("PATH".into())),
            (
                "env BASH_ENV=x bash -c ls",
                U::Environment("BASH_ENV".into()),
            ),
            ("env -S 'rm x'", wrapper("env", "-S")),
            ("sh script.sh", U::ShellScript("sh".into())),
            ("echo 'rm x' | bash", U::ShellScript("bash".into())),
            ("sh <<EOF\nrm x\nEOF", U::ShellScript("sh".into())),
            ("bash -lc 'ls'", wrapper("bash", "-lc")),
            ("bash -c \"$CMD\"", wrapper("bash", "$CMD")),
            ("sudo -s", wrapper("sudo", "-s")),
            ("timeout --bogus 5 rm x", wrapper("timeout", "--bogus")),
            ("xargs -J x rm", wrapper("xargs", "-J")),
            ("command -x rm", wrapper("command", "-x")),
            ("echo 'open", U::Syntax("an unterminated `'`")),
            ("echo \"open", U::Syntax("an unterminated `\"`")),
            ("echo $(ls", U::Syntax("an unterminated `$(`")),
            ("(ls", U::Syntax("an unterminated `(`")),
            ("ls)", U::Syntax("an unmatched `)`")),
            ("ls >", U::Syntax("a redirection without a target")),
            (
                "find . -exec rm {}",
                U::Syntax("`find -exec` without `;` or `+`"),
            ),
        ];
        for (source, expected) in cases {
            assert_eq!(texts(source), Err(expected), "{source:?}");
        }
        let deep = format!("{}ls{}", "$(echo ".repeat(20), ")".repeat(20));
        assert_eq!(texts(&deep), Err(U::TooDeep));
    }

    #[test]
    fn a_deny_list_also_sees_the_basename() {
        let commands = analyse("./rm x").unwrap();
        assert_eq!(commands[0].deny_texts(), vec!["./rm x", "rm x"]);
        let commands = analyse("/bin/rm x").unwrap();
        assert_eq!(commands[0].deny_texts(), vec!["rm x"]);
    }
}
