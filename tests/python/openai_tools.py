"""Function calling, structured output and the Responses API through the official OpenAI Python
client, the way a coding agent's SDK drives a server: tool calls plain and streamed (OpenAI's exact
streaming shape), `tool_choice` "required" and a named function (the call must parse and match the
function's schema), `response_format` with a strict JSON schema, `client.responses.create` with a
function tool and `previous_response_id`, and the bad requests that must come back as 400s the SDK
raises as BadRequestError, with a message naming the problem.

Each check runs on its own; the script prints one JSON object (`passed`: names, `failed`: name ->
why) and exits 1 when a check failed, so the Rust test that starts the server only has to run it.

usage: openai_tools.py BASE_URL MODEL API_KEY [CHECK ...]   (no CHECK: all of them)
"""

import json

import checks
import jsonschema
import openai

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "description": "An IANA time zone, e.g. Europe/Paris"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}


def chat_tool(name, description):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": SCHEMAS[name]}}


TOOLS = [
    chat_tool("get_weather", "Current weather in a city."),
    chat_tool("get_time", "Current time in a time zone."),
]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}]
# Small caps: every reply is bounded in size as well as in time (the client's timeout).
MAX_TOKENS = 256


def check_call(call, names=SCHEMAS):
    """One `tool_calls` entry of a whole reply: OpenAI's shape, a known function, arguments that
    are a JSON object valid under that function's schema. Returns (name, arguments)."""
    assert isinstance(call.id, str) and call.id, f"no id: {call}"
    assert call.type == "function", f"type {call.type!r}"
    name = call.function.name
    assert name in names, f"unknown function {name!r}"
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict), f"arguments are not an object: {call.function.arguments!r}"
    jsonschema.validate(args, SCHEMAS[name])
    return name, args


def non_streamed_tool_call(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ASK_WEATHER, tools=TOOLS, temperature=0, max_tokens=MAX_TOKENS
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", f"finish_reason {choice.finish_reason!r}: {choice.message}"
    calls = choice.message.tool_calls
    assert calls, f"no tool call: {choice.message}"
    name, args = check_call(calls[0])
    assert name == "get_weather", name
    assert "paris" in args["city"].lower(), args

    # The tool's answer goes back with the call's id; the model then answers in words.
    history = ASK_WEATHER + [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": json.dumps({"temperature_c": 22, "sky": "clear"})},
    ]
    final = client.chat.completions.create(
        model=model, messages=history, tools=TOOLS, temperature=0, max_tokens=MAX_TOKENS
    )
    assert final.choices[0].finish_reason == "stop", final.choices[0]
    assert final.choices[0].message.content, final.choices[0].message
    return {"call": args, "answer": final.choices[0].message.content}


def streamed_tool_call(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=ASK_WEATHER,
        tools=TOOLS,
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    calls, finish, usage = {}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.finish_reason:
                assert finish is None, "two finish reasons"
                finish = choice.finish_reason
            for delta in choice.delta.tool_calls or []:
                assert isinstance(delta.index, int), f"no index: {delta}"
                seen = calls.setdefault(delta.index, {"id": [], "type": [], "name": [], "arguments": []})
                if delta.id is not None:
                    seen["id"].append(delta.id)
                if delta.type is not None:
                    seen["type"].append(delta.type)
                if delta.function is not None:
                    if delta.function.name is not None:
                        seen["name"].append(delta.function.name)
                    if delta.function.arguments:
                        seen["arguments"].append(delta.function.arguments)
    assert finish == "tool_calls", f"finish_reason {finish!r}"
    assert calls, "no tool call streamed"
    assert sorted(calls) == list(range(len(calls))), f"indexes {sorted(calls)}"
    for index, seen in calls.items():
        # The id, the type and the name come once, in the call's first chunk; the arguments
        # come as fragments whose concatenation is the whole JSON object.
        assert len(seen["id"]) == 1 and seen["id"][0], f"call {index}: ids {seen['id']}"
        assert seen["type"] == ["function"], f"call {index}: types {seen['type']}"
        assert len(seen["name"]) == 1, f"call {index}: names {seen['name']}"
        assert len(seen["arguments"]) >= 2, f"call {index}: arguments in {len(seen['arguments'])} piece(s)"
        args = json.loads("".join(seen["arguments"]))
        jsonschema.validate(args, SCHEMAS[seen["name"][0]])
    assert usage is not None and usage.completion_tokens > 0, usage
    return {index: {"name": s["name"][0], "pieces": len(s["arguments"])} for index, s in calls.items()}


def tool_choice_required(client, model):
    # A question no tool answers: only the enforced choice makes the model call one.
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a haiku about the sea."}],
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", f"finish_reason {choice.finish_reason!r}: {choice.message}"
    assert choice.message.tool_calls, choice.message
    return [check_call(call)[0] for call in choice.message.tool_calls]


def streamed_call_matches_whole(client, model):
    # A call whose every token is forced (one function, one allowed value), so any model writes
    # the same text twice: streamed, its fragments must add up to the arguments the same request
    # gets whole, byte for byte, in every family's call format (a template that knows no tools
    # answers in a {"tool_calls": [...]} envelope).
    zone = {
        "type": "object",
        "properties": {"zone": {"type": "string", "enum": ["UTC"]}},
        "required": ["zone"],
        "additionalProperties": False,
    }
    request = dict(
        model=model,
        messages=[{"role": "user", "content": "Set the clock to UTC."}],
        tools=[{"type": "function", "function": {"name": "set_zone", "parameters": zone}}],
        tool_choice={"type": "function", "function": {"name": "set_zone"}},
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    whole = client.chat.completions.create(**request).choices[0]
    assert whole.finish_reason == "tool_calls", f"finish_reason {whole.finish_reason!r}: {whole.message}"
    [call] = whole.message.tool_calls
    pieces, names, finish = [], [], None
    for chunk in client.chat.completions.create(**request, stream=True):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                assert delta.index == 0, f"a second call: {delta}"
                if delta.function is not None and delta.function.name is not None:
                    names.append(delta.function.name)
                if delta.function is not None and delta.function.arguments:
                    pieces.append(delta.function.arguments)
    assert finish == "tool_calls", f"streamed finish_reason {finish!r}"
    assert names == ["set_zone"], names
    streamed = "".join(pieces)
    assert streamed == call.function.arguments, f"streamed {streamed!r}, whole {call.function.arguments!r}"
    assert json.loads(streamed) == {"zone": "UTC"}, streamed
    return {"arguments": streamed, "pieces": len(pieces)}


def tool_choice_named(client, model):
    # The user asks about the weather; the named choice must still win.
    reply = client.chat.completions.create(
        model=model,
        messages=ASK_WEATHER,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    calls = reply.choices[0].message.tool_calls
    assert calls and len(calls) == 1, reply.choices[0].message
    name, args = check_call(calls[0], names={"get_time": CLOCK})
    return args


def response_format_json_schema(client, model):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "level": {"type": "string", "enum": ["junior", "senior", "staff"]},
            "remote": {"type": "boolean"},
        },
        "required": ["name", "age", "level", "remote"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Invent a software developer."}],
        response_format={"type": "json_schema", "json_schema": {"name": "developer", "strict": True, "schema": schema}},
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", f"finish_reason {choice.finish_reason!r}: {choice.message.content!r}"
    value = json.loads(choice.message.content)
    jsonschema.validate(value, schema)
    return value


def responses_function_call(client, model):
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER,
            "strict": True,
        }
    ]
    first = client.responses.create(
        model=model,
        input="What is the weather in Paris right now? Use the get_weather tool.",
        tools=tools,
        tool_choice="required",
        temperature=0,
        max_output_tokens=MAX_TOKENS,
    )
    assert first.status == "completed", first.status
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) >= 1, [item.type for item in first.output]
    call = calls[0]
    assert call.name == "get_weather" and call.call_id, call
    jsonschema.validate(json.loads(call.arguments), WEATHER)

    # The conversation goes on from the stored response: only the tool's output is sent (the
    # call it answers is known from the kept conversation, or the request would be refused).
    # `tool_choice: none` asks for words: a 0.5B model offered the tool again may call it again.
    second = client.responses.create(
        model=model,
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temperature_c": 22})}
        ],
        tools=tools,
        tool_choice="none",
        temperature=0,
        max_output_tokens=MAX_TOKENS,
    )
    assert second.status == "completed", second.status
    assert second.previous_response_id == first.id, second.previous_response_id
    assert second.output_text, [item.type for item in second.output]
    return {"first": first.id, "arguments": call.arguments, "answer": second.output_text}


def responses_streamed(client, model):
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather in a city.", "parameters": WEATHER}]
    events = list(
        client.responses.create(
            model=model,
            input="What is the weather in Paris right now? Use the get_weather tool.",
            tools=tools,
            tool_choice="required",
            temperature=0,
            max_output_tokens=MAX_TOKENS,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created", kinds[:3]
    assert kinds[-1] == "response.completed", kinds[-3:]
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done, f"no arguments.done in {sorted(set(kinds))}"
    assert pieces == done[0].arguments, (pieces, done[0].arguments)
    final = events[-1].response
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls and calls[0].arguments == done[0].arguments, final.output
    jsonschema.validate(json.loads(pieces), WEATHER)
    return {"events": len(events), "arguments": pieces}


def bad_request(call, *names):
    """The call must fail with a 400 the SDK raises as BadRequestError, an OpenAI-style error
    body, and a message that names one of `names`."""
    try:
        call()
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        assert body.get("type") == "invalid_request_error", f"error body {e.body!r}"
        message = body.get("message") or ""
        assert any(name.lower() in message.lower() for name in names), f"message {message!r} names none of {names}"
        return message
    raise AssertionError("the request was accepted")


def error_schema_not_json_schema(client, model):
    broken = {"type": "function", "function": {"name": "broken_tool", "parameters": {"type": "banana", "properties": 7}}}
    return bad_request(
        lambda: client.chat.completions.create(model=model, messages=ASK_WEATHER, tools=[broken], max_tokens=8),
        "broken_tool",
        "banana",
    )


def error_tool_choice_names_no_tool(client, model):
    return bad_request(
        lambda: client.chat.completions.create(
            model=model,
            messages=ASK_WEATHER,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "no_such_tool"}},
            max_tokens=8,
        ),
        "no_such_tool",
    )


def error_tool_call_id_answers_nothing(client, model):
    messages = ASK_WEATHER + [{"role": "tool", "tool_call_id": "call_answers_nothing", "content": "22 C"}]
    return bad_request(
        lambda: client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=8),
        "call_answers_nothing",
    )


def error_previous_response_missing(client, model):
    return bad_request(
        lambda: client.responses.create(
            model=model, previous_response_id="resp_does_not_exist", input="Hello", max_output_tokens=8
        ),
        "resp_does_not_exist",
    )


CHECKS = [
    non_streamed_tool_call,
    streamed_tool_call,
    tool_choice_required,
    tool_choice_named,
    streamed_call_matches_whole,
    response_format_json_schema,
    responses_function_call,
    responses_streamed,
    error_schema_not_json_schema,
    error_tool_choice_names_no_tool,
    error_tool_call_id_answers_nothing,
    error_previous_response_missing,
]


def main():
    checks.run(
        CHECKS,
        lambda base_url, api_key: openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300),
    )


if __name__ == "__main__":
    main()
