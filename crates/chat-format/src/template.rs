//! The model's own Jinja chat template, rendered with minijinja (docs/ARCHITECTURE.md,
//! "Function calling").
//!
//! Templates are written for Python's Jinja2 with Hugging Face's settings (`trim_blocks`,
//! `lstrip_blocks`, `tojson`, `raise_exception`, Python string methods); minijinja with its
//! Python-compatibility methods renders them. Message text is passed to the template as
//! placeholders and put back afterwards as plain prompt parts, so nothing a user, a tool or a
//! model wrote can become a control token, whatever the template does around it.
//!
//! A template is code that came with a model file. [`TemplateSource`] is what can be known of it
//! without running it; [`ChatTemplate`] runs it, and minijinja runs some of it already while
//! compiling (it folds constant expressions). Time is bounded here ([`RENDER_FUEL`]); memory
//! cannot be from inside the process (`"x" * 10**11` is one allocation, and a failed allocation
//! aborts), so the server compiles and renders in a child process whose memory is capped
//! (docs/ARCHITECTURE.md, "Function calling").

use crate::FormatError;
use crate::format::CallFormat;
use crate::tools::{ToolCall, ToolSpec};
use catena_engine_api::PromptPart;
use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value as Jinja};
use serde_json::{Value, json};

/// A template for GGUF files without one: ChatML with Hermes-style tools, the format of the
/// Qwen2.5 family and of the AFM checkpoints.
const CHATML_WITH_TOOLS: &str = r#"{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"#;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool's result, answering a call by its id.
    Tool,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation with tools.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Turn {
    pub role: Role,
    pub content: Option<String>,
    /// The calls an assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Turn {
    pub fn new(role: Role, content: impl Into<String>) -> Turn {
        Turn {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// What a render may spend: minijinja's fuel, about one unit per instruction of its machine.
/// Qwen2.5's template spends 7,782 on a conversation of 200 turns (66 calls) with 50 tools, the
/// built-in one 6,526 (`the_fuel_bound_leaves_real_templates_far_below_it` renders them on a
/// fiftieth of this); a loop that never ends stops here after about 0.3 s on one core.
pub const RENDER_FUEL: u64 = 10_000_000;

/// The longest prompt a render may write: a prompt's message text travels apart from the
/// template's output, so this is markup and tool descriptions alone.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// A model's chat template as its file gives it, not compiled: the text, and how the model
/// writes tool calls (read from the text, never run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSource {
    text: String,
}

impl TemplateSource {
    /// `source` is the GGUF's `tokenizer.chat_template`; `None`: ChatML with Hermes tools.
    pub fn new(source: Option<&str>) -> TemplateSource {
        TemplateSource {
            text: source.unwrap_or(CHATML_WITH_TOOLS).to_string(),
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the template itself lays out `tools`; if not, Catena describes them in the system
    /// message (the [`CallFormat::Json`] way).
    fn knows_tools(&self) -> bool {
        self.text.contains("tools")
    }

    /// How this model writes tool calls.
    pub fn call_format(&self) -> CallFormat {
        if self.knows_tools() {
            CallFormat::detect(&self.text)
        } else {
            CallFormat::Json
        }
    }

    /// Compiles the template. This runs the template's constant expressions, so what the file
    /// holds is code running here: see the module's documentation.
    pub fn compile(&self, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, FormatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", self.text.clone())
            .map_err(|e| FormatError::Template(describe(&e)))?;
        Ok(ChatTemplate {
            env,
            source: self.clone(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }
}

/// A model's chat template, compiled and ready to render.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: TemplateSource,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("format", &self.call_format())
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` (the GGUF's `tokenizer.chat_template`; `None`: ChatML with Hermes
    /// tools). `bos_token` and `eos_token` are the texts templates may write.
    pub fn new(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, FormatError> {
        TemplateSource::new(source).compile(bos_token, eos_token)
    }

    /// How this model writes tool calls.
    pub fn call_format(&self) -> CallFormat {
        self.source.call_format()
    }

    /// The prompt for `turns` with `tools` offered (none: a plain chat), up to the opening of the
    /// assistant's turn. Template markup is special; message text is plain.
    pub fn render(
        &self,
        turns: &[Turn],
        tools: &[ToolSpec],
    ) -> Result<Vec<PromptPart>, FormatError> {
        // A message's text can hold no mark by chance: the nonce is new for every render.
        let nonce = uuid::Uuid::now_v7().simple().to_string();
        let mut made = 0usize;
        let mut placeholder = || {
            let mark = format!("\u{E000}{nonce}:{made}\u{E001}");
            made += 1;
            mark
        };
        let mut messages: Vec<Value> = Vec::with_capacity(turns.len() + 1);
        let described;
        let turns = if !tools.is_empty() && !self.source.knows_tools() {
            described = describe_tools(turns, tools);
            &described[..]
        } else {
            turns
        };
        for turn in turns {
            messages.push(self.message(turn, &mut placeholder)?);
        }
        let tools_json: Vec<Value> = tools.iter().map(ToolSpec::to_json).collect();
        let context = json!({
            "messages": messages,
            "tools": if tools.is_empty() { Value::Null } else { Value::Array(tools_json) },
            "add_generation_prompt": true,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        });
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| FormatError::Template(describe(&e)))?;
        let rendered = template
            .render(Jinja::from_serialize(&context))
            .map_err(|e| FormatError::Template(describe(&e)))?;
        if rendered.len() > MAX_RENDERED_BYTES {
            return Err(FormatError::Template(format!(
                "it wrote more than {} MiB of prompt",
                MAX_RENDERED_BYTES >> 20
            )));
        }
        Ok(split_marks(&rendered, &nonce, turns))
    }

    /// The prompt of `turns`' leading system messages with `tools` offered, then an empty user
    /// message: up to where a conversation's first user message would begin, it is what every
    /// conversation that gives the same instructions and offers the same tools begins with (a
    /// coding client's requests). The engine keeps the tokens it and [`Self::render`]'s prompt
    /// agree on in its prompt cache (docs/ARCHITECTURE.md, "The prompt cache"). The user
    /// message is there because templates expect one: Qwen2.5's reads `messages[0]`, and
    /// templates that fold the system message into the first user turn keep it only so.
    pub fn render_instructions(
        &self,
        turns: &[Turn],
        tools: &[ToolSpec],
    ) -> Result<Vec<PromptPart>, FormatError> {
        let leading = turns.iter().take_while(|t| t.role == Role::System).count();
        let mut alone = turns[..leading].to_vec();
        alone.push(Turn::new(Role::User, ""));
        self.render(&alone, tools)
    }

    fn message(
        &self,
        turn: &Turn,
        placeholder: &mut dyn FnMut() -> String,
    ) -> Result<Value, FormatError> {
        let mut message = json!({
            "role": turn.role.as_str(),
            "content": turn.content.as_ref().map(|_| placeholder()),
        });
        if !turn.tool_calls.is_empty() {
            let calls = turn
                .tool_calls
                .iter()
                .map(|call| {
                    let arguments: Value = serde_json::from_str(&call.arguments).map_err(|_| {
                        FormatError::BadTool {
                            param: "messages".into(),
                            message: format!(
                                "the arguments of tool call `{}` are not a JSON object.",
                                call.id
                            ),
                        }
                    })?;
                    Ok(json!({
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": arguments},
                    }))
                })
                .collect::<Result<Vec<_>, FormatError>>()?;
            message["tool_calls"] = Value::Array(calls);
        }
        if let Some(id) = &turn.tool_call_id {
            message["tool_call_id"] = Value::String(id.clone());
        }
        Ok(message)
    }
}

/// The turns with the tools described in the system message, for templates that lay out none.
fn describe_tools(turns: &[Turn], tools: &[ToolSpec]) -> Vec<Turn> {
    let listed: Vec<String> = tools.iter().map(|t| t.to_json().to_string()).collect();
    let guide = format!(
        "You can call these functions:\n{}\n\nTo call functions, answer with only this JSON \
         object: {{\"tool_calls\": [{{\"name\": <function name>, \"arguments\": <arguments \
         object>}}]}}. Otherwise answer in plain text.",
        listed.join("\n")
    );
    let mut out = turns.to_vec();
    match out.first_mut() {
        Some(first) if first.role == Role::System => {
            let text = first.content.take().unwrap_or_default();
            first.content = Some(format!("{text}\n\n{guide}"));
        }
        _ => out.insert(0, Turn::new(Role::System, guide)),
    }
    out
}

/// The rendered prompt as parts: the template's own text special, each placeholder replaced by
/// its message's text, plain. Placeholders are numbered in the order the messages' contents were
/// made (one per turn that has content).
fn split_marks(rendered: &str, nonce: &str, turns: &[Turn]) -> Vec<PromptPart> {
    let contents: Vec<&str> = turns.iter().filter_map(|t| t.content.as_deref()).collect();
    let open = format!("\u{E000}{nonce}:");
    let mut parts = Vec::new();
    let mut rest = rendered;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let Some(close) = after.find('\u{E001}') else {
            break;
        };
        let Some(text) = after[..close]
            .parse::<usize>()
            .ok()
            .and_then(|i| contents.get(i))
        else {
            break;
        };
        if at > 0 {
            parts.push(PromptPart::special(&rest[..at]));
        }
        if !text.is_empty() {
            parts.push(PromptPart::plain(*text));
        }
        rest = &after[close + '\u{E001}'.len_utf8()..];
    }
    if !rest.is_empty() {
        parts.push(PromptPart::special(rest));
    }
    parts
}

fn describe(e: &Error) -> String {
    if e.kind() == ErrorKind::OutOfFuel {
        return format!(
            "it ran past its budget of {RENDER_FUEL} steps (a loop that does not end?) and was \
             stopped"
        );
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// `tojson` as Hugging Face renders it (`json.dumps`' spacing, `indent=` honoured), with `<`,
/// `>` and `&` escaped so that JSON in a prompt can never spell a control token.
fn tojson(value: &Jinja, kwargs: Kwargs) -> Result<Jinja, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let value: Value = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = match indent {
        Some(width) => {
            let pad = " ".repeat(width);
            let formatter = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            write_json(&value, formatter)
        }
        None => write_json(&value, PythonSpacing),
    }
    .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let escaped = text
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    Ok(Jinja::from_safe_string(escaped))
}

fn write_json(
    value: &Value,
    formatter: impl serde_json::ser::Formatter,
) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(value, &mut serializer)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `json.dumps`' default separators: `", "` and `": "`.
struct PythonSpacing;

impl serde_json::ser::Formatter for PythonSpacing {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

fn item_separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

fn raise_exception(message: String) -> Result<Jinja, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)` (Llama 3.x templates date their system message): `%d`, `%m`, `%Y`,
/// `%b` and `%B` in UTC; other directives are left as written.
fn strftime_now(format: String) -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0);
    let (year, month, day) = civil_date(days as i64);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = MONTHS[(month as usize).saturating_sub(1).min(11)];
    format
        .replace("%d", &format!("{day:02}"))
        .replace("%m", &format!("{month:02}"))
        .replace("%Y", &year.to_string())
        .replace("%B", name)
        .replace("%b", &name[..3])
}

/// Year, month and day of the `days`-th day after 1970-01-01 (the proleptic Gregorian calendar).
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
