//! The tools a request offers, how it lets the model choose among them, and the calls it makes.

use crate::FormatError;
use crate::json::lark_json;
use serde_json::{Map, Value};

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema for the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// The OpenAI shape templates expect (`{"type": "function", "function": {...}}`).
    pub fn to_json(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(description) = &self.description {
            function.insert("description".into(), Value::String(description.clone()));
        }
        function.insert("parameters".into(), self.parameters.clone());
        serde_json::json!({"type": "function", "function": function})
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides between prose and calls; a call it starts is held to its schema.
    #[default]
    Auto,
    /// No call: the tools are left out of the prompt.
    None,
    /// At least one call, from the first token.
    Required,
    /// A call of this function, from the first token.
    Named(String),
}

/// A call the model made: `arguments` is the JSON object's text, as OpenAI sends it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Checks a request's tools: names usable and unique, parameters a JSON Schema for an object,
/// and a named `tool_choice` naming one of them. `param` prefixes the places named in errors.
pub fn check_tools(tools: &[ToolSpec], choice: &ToolChoice) -> Result<(), FormatError> {
    for (i, tool) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        let name_ok = !tool.name.is_empty()
            && tool.name.len() <= 64
            && tool
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !name_ok {
            return Err(bad(
                &param,
                format!(
                    "{param}.function.name `{}` must be 1 to 64 letters, digits, `_`, `-` or `.`.",
                    tool.name
                ),
            ));
        }
        if tools[..i].iter().any(|t| t.name == tool.name) {
            return Err(bad(
                &param,
                format!("{param}: the function name `{}` is given twice.", tool.name),
            ));
        }
        let at = format!("{param}.function.parameters");
        check_schema(&tool.parameters, &at)?;
        if tool.parameters.get("type").is_some_and(|t| t != "object") {
            return Err(bad(
                &at,
                format!("{at} must describe an object (`\"type\": \"object\"`)."),
            ));
        }
    }
    if let ToolChoice::Named(name) = choice
        && !tools.iter().any(|t| &t.name == name)
    {
        return Err(bad(
            "tool_choice",
            format!("`tool_choice` names the function `{name}`, which is not among `tools`."),
        ));
    }
    if matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) && tools.is_empty() {
        return Err(bad(
            "tool_choice",
            "`tool_choice` asks for a call, but the request gives no `tools`.".into(),
        ));
    }
    Ok(())
}

const JSON_TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// A structural check of a JSON Schema: the keywords that shape a value have the types the
/// specification gives them. The grammar compiler checks the rest (and refuses, with a clear
/// error, what it cannot enforce) when a call is constrained; this catches what is not a schema
/// at all, such as `{"type": "dict"}` or `"properties": []`, before anything runs.
fn check_schema(schema: &Value, at: &str) -> Result<(), FormatError> {
    let Some(object) = schema.as_object() else {
        if schema.is_boolean() {
            return Ok(());
        }
        return Err(bad(at, format!("{at} is not a JSON Schema (an object).")));
    };
    if let Some(kind) = object.get("type") {
        let known = |v: &Value| v.as_str().is_some_and(|t| JSON_TYPES.contains(&t));
        let ok = match kind {
            Value::Array(kinds) => !kinds.is_empty() && kinds.iter().all(known),
            other => known(other),
        };
        if !ok {
            return Err(bad(
                at,
                format!(
                    "{at}.type is {kind}; JSON Schema types are {}.",
                    JSON_TYPES.join(", ")
                ),
            ));
        }
    }
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        match object.get(key) {
            None => {}
            Some(Value::Object(children)) => {
                for (name, child) in children {
                    check_schema(child, &format!("{at}.{key}.{name}"))?;
                }
            }
            Some(_) => return Err(bad(at, format!("{at}.{key} must be an object of schemas."))),
        }
    }
    for key in ["items", "additionalProperties", "not", "contains"] {
        if let Some(child) = object.get(key) {
            check_schema(child, &format!("{at}.{key}"))?;
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        match object.get(key) {
            None => {}
            Some(Value::Array(children)) if !children.is_empty() => {
                for (i, child) in children.iter().enumerate() {
                    check_schema(child, &format!("{at}.{key}[{i}]"))?;
                }
            }
            Some(_) => {
                return Err(bad(
                    at,
                    format!("{at}.{key} must be a non-empty array of schemas."),
                ));
            }
        }
    }
    match object.get("required") {
        None => {}
        Some(Value::Array(names)) if names.iter().all(Value::is_string) => {}
        Some(_) => return Err(bad(at, format!("{at}.required must be an array of names."))),
    }
    match object.get("enum") {
        None | Some(Value::Array(_)) => Ok(()),
        Some(_) => Err(bad(at, format!("{at}.enum must be an array."))),
    }
}

fn bad(param: &str, message: String) -> FormatError {
    FormatError::BadTool {
        param: param.split('.').next().unwrap_or(param).to_string(),
        message,
    }
}

/// The grammar for `response_format`: any JSON object (`schema` = `None`), or one matching
/// `schema`. Errors name the schema's place as `response_format`.
pub fn response_grammar(schema: Option<&Value>) -> Result<String, FormatError> {
    let schema = match schema {
        None => serde_json::json!({"type": "object"}),
        Some(schema) => {
            check_schema(schema, "response_format.json_schema.schema").map_err(|e| match e {
                FormatError::BadTool { message, .. } => FormatError::BadTool {
                    param: "response_format".into(),
                    message,
                },
                other => other,
            })?;
            schema.clone()
        }
    };
    Ok(format!(
        "start: {}\n",
        lark_json(&with_fixed_spacing(schema))
    ))
}

/// The schema with `json.dumps`' spacing and no free whitespace: a small model let loose in
/// JSON's optional whitespace can write blanks until its budget runs out.
pub(crate) fn with_fixed_spacing(mut schema: Value) -> Value {
    if let Value::Object(object) = &mut schema {
        object.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
        });
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: None,
            parameters,
        }
    }

    #[test]
    fn usable_tools_pass_and_broken_ones_are_named() {
        let weather = tool(
            "get_weather",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        );
        assert_eq!(
            check_tools(std::slice::from_ref(&weather), &ToolChoice::Auto),
            Ok(())
        );
        let dict = tool("f", json!({"type": "dict", "properties": {}}));
        let err = check_tools(&[dict], &ToolChoice::Auto).unwrap_err();
        assert!(
            err.to_string()
                .contains("tools[0].function.parameters.type"),
            "{err}"
        );
        let listed = tool("f", json!({"type": "object", "properties": [1]}));
        let err = check_tools(&[listed], &ToolChoice::Auto).unwrap_err();
        assert!(
            err.to_string().contains("properties must be an object"),
            "{err}"
        );
        let nested = tool(
            "f",
            json!({"type": "object", "properties": {"a": {"type": "float"}}}),
        );
        let err = check_tools(&[nested], &ToolChoice::Auto).unwrap_err();
        assert!(err.to_string().contains("properties.a.type"), "{err}");
        let err = check_tools(
            std::slice::from_ref(&weather),
            &ToolChoice::Named("nope".into()),
        )
        .unwrap_err();
        assert_eq!(
            err,
            FormatError::BadTool {
                param: "tool_choice".into(),
                message: "`tool_choice` names the function `nope`, which is not among `tools`."
                    .into()
            }
        );
        let twice = check_tools(&[weather.clone(), weather], &ToolChoice::Auto).unwrap_err();
        assert!(twice.to_string().contains("given twice"));
        assert!(check_tools(&[], &ToolChoice::Required).is_err());
        assert!(check_tools(&[tool("bad name", json!({}))], &ToolChoice::Auto).is_err());
    }
}
