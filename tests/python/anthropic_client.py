"""Anthropic's Messages API (`/v1/messages`) through the official Anthropic Python SDK, the way
Claude Code, Cline and Anthropic's SDKs drive a server: a plain message and a streamed one (the
SDK's `messages.stream` helper, which assembles Anthropic's events and refuses them out of order),
a stop sequence, a forced tool call (`tool_choice` of type `tool`) whose `input` matches the tool's
schema, the `tool_result` round trip, a streamed call, `tool_choice` `any`, structured output
(`output_config.format`) that matches its JSON schema, and the bad requests that must come back
as the SDK's typed errors with Anthropic's error body. The key goes as `x-api-key`, as the SDK
sends it.

Each check runs on its own; the script prints one JSON object (`passed`: names, `failed`: name ->
why) and exits 1 when a check failed, so the Rust test that starts the server only has to run it.

usage: anthropic_client.py BASE_URL MODEL API_KEY [CHECK ...]   (no CHECK: all of them)
BASE_URL is the server's root (the SDK adds `/v1/messages`).
"""

import json

import anthropic
import checks
import jsonschema

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
TOOLS = [
    {"name": "get_weather", "description": "Current weather in a city.", "input_schema": WEATHER},
    {"name": "get_time", "description": "Current time in a time zone.", "input_schema": CLOCK},
]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now? Use the get_weather tool."}]
# Small caps: every reply is bounded in size as well as in time (the client's timeout).
MAX_TOKENS = 256
# Greedy decoding, for answers a 0.5B model gives the same way every time. This SDK no longer has
# a `temperature` argument; the field is still in the wire format, and clients built on older SDKs
# send it.
GREEDY = {"temperature": 0}


def texts(message):
    return "".join(block.text for block in message.content if block.type == "text")


def tool_uses(message, names=SCHEMAS):
    """The `tool_use` blocks of a message, each checked: Anthropic's shape, a known tool, an
    `input` object valid under the tool's schema."""
    uses = [block for block in message.content if block.type == "tool_use"]
    for use in uses:
        assert use.id.startswith("toolu_"), f"id {use.id!r}"
        assert use.name in names, f"unknown tool {use.name!r}"
        assert isinstance(use.input, dict), f"input is not an object: {use.input!r}"
        jsonschema.validate(use.input, SCHEMAS[use.name])
    return uses


def plain_message(client, model):
    message = client.messages.create(
        model=model,
        max_tokens=64,
        system="You are a calculator. Answer with the number only.",
        messages=[{"role": "user", "content": "What is 1 + 2?"}],
        extra_body=GREEDY,
        metadata={"user_id": "catena-test"},
    )
    assert message.type == "message" and message.role == "assistant", message
    assert message.id.startswith("msg_"), message.id
    assert message.model == model, message.model
    assert [block.type for block in message.content] == ["text"], message.content
    assert "3" in texts(message), texts(message)
    assert message.stop_reason == "end_turn", message.stop_reason
    assert message.stop_sequence is None, message.stop_sequence
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0, message.usage
    return {"text": texts(message), "usage": message.usage.model_dump()}


def streamed_message(client, model):
    kinds, pieces = [], []
    with client.messages.stream(
        model=model,
        max_tokens=64,
        messages=[{"role": "user", "content": "Name three colours of the rainbow."}],
        extra_body=GREEDY,
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "text":
                pieces.append(event.text)
        final = stream.get_final_message()
    # The helper has already refused events out of order; the order is checked here too.
    raw = [k for k in kinds if k not in ("text", "input_json")]
    assert raw[0] == "message_start", raw[:3]
    assert raw[-2:] == ["message_delta", "message_stop"], raw[-3:]
    assert raw[1] == "content_block_start" and raw[-3] == "content_block_stop", raw
    assert raw.count("content_block_start") == raw.count("content_block_stop") == 1, raw
    assert len(pieces) >= 2, f"the text came in {len(pieces)} piece(s)"
    assert "".join(pieces) == texts(final) and texts(final).strip(), (pieces, final.content)
    assert final.stop_reason in ("end_turn", "max_tokens"), final.stop_reason
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0, final.usage
    return {"events": len(kinds), "pieces": len(pieces), "text": texts(final)}


def stop_sequence(client, model):
    message = client.messages.create(
        model=model,
        max_tokens=64,
        messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        stop_sequences=["5"],
        extra_body=GREEDY,
    )
    assert message.stop_reason == "stop_sequence", f"{message.stop_reason}: {texts(message)!r}"
    assert message.stop_sequence == "5", message.stop_sequence
    assert "4" in texts(message) and "5" not in texts(message), texts(message)
    return texts(message)


def forced_tool_call(client, model):
    # The user asks about the weather; the named choice must still win.
    message = client.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=ASK_WEATHER,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_time"},
        extra_body=GREEDY,
    )
    assert message.stop_reason == "tool_use", f"{message.stop_reason}: {message.content}"
    uses = tool_uses(message, names={"get_time": CLOCK})
    assert len(uses) == 1, message.content
    return uses[0].input


def tool_result_round_trip(client, model):
    first = client.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=ASK_WEATHER,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body=GREEDY,
    )
    uses = tool_uses(first)
    assert uses and first.stop_reason == "tool_use", first.content
    assert "paris" in uses[0].input["city"].lower(), uses[0].input
    # The assistant's message goes back as the SDK gave it, the tool's result answering its id.
    # `tool_choice: none` asks for words: a 0.5B model offered the tool again may call it again.
    history = ASK_WEATHER + [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": uses[0].id,
                    "content": [{"type": "text", "text": json.dumps({"temperature_c": 22, "sky": "clear"})}],
                }
            ],
        },
    ]
    final = client.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=history,
        tools=TOOLS,
        tool_choice={"type": "none"},
        extra_body=GREEDY,
    )
    assert final.stop_reason == "end_turn", f"{final.stop_reason}: {final.content}"
    assert not tool_uses(final) and texts(final).strip(), final.content
    return {"call": uses[0].input, "answer": texts(final)}


def streamed_tool_call(client, model):
    fragments, kinds = [], []
    with client.messages.stream(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=ASK_WEATHER,
        tools=TOOLS,
        tool_choice={"type": "any"},
        extra_body=GREEDY,
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                fragments.append(event.delta.partial_json)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use", f"{final.stop_reason}: {final.content}"
    uses = tool_uses(final)
    assert len(uses) == 1, final.content
    # The input comes as fragments whose concatenation is the whole JSON object.
    assert len(fragments) >= 2, f"the input came in {len(fragments)} piece(s)"
    assert json.loads("".join(fragments)) == uses[0].input, (fragments, uses[0].input)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    return {"name": uses[0].name, "input": uses[0].input, "pieces": len(fragments)}


def tool_choice_any(client, model):
    # A request no tool answers: only the enforced choice makes the model call one.
    message = client.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": "Write a haiku about the sea."}],
        tools=TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
    )
    assert message.stop_reason == "tool_use", f"{message.stop_reason}: {message.content}"
    uses = tool_uses(message)
    assert len(uses) == 1, message.content
    return uses[0].name


def structured_output(client, model):
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
    message = client.messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": "Invent a software developer."}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        extra_body=GREEDY,
    )
    assert message.stop_reason == "end_turn", f"{message.stop_reason}: {message.content}"
    value = json.loads(texts(message))
    jsonschema.validate(value, schema)
    return value


def refused(error_class, error_type, call, *names):
    """The call must fail with the SDK's `error_class`, Anthropic's error body of `error_type`,
    and a message that names one of `names`."""
    try:
        call()
    except error_class as e:
        body = e.body if isinstance(e.body, dict) else {}
        assert body.get("type") == "error", f"error body {e.body!r}"
        assert body.get("error", {}).get("type") == error_type, f"error body {e.body!r}"
        assert e.type == error_type, e.type
        message = body["error"].get("message") or ""
        assert any(name.lower() in message.lower() for name in names), f"message {message!r} names none of {names}"
        return message
    raise AssertionError("the request was accepted")


def bad_request(call, *names):
    return refused(anthropic.BadRequestError, "invalid_request_error", call, *names)


def error_unknown_model(client, model):
    return refused(
        anthropic.NotFoundError,
        "not_found_error",
        lambda: client.messages.create(
            model="claude-no-such-model", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        ),
        "claude-no-such-model",
    )


def error_tool_result_answers_nothing(client, model):
    messages = ASK_WEATHER + [
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_answers_nothing", "content": "22 C"}]},
    ]
    return bad_request(
        lambda: client.messages.create(model=model, max_tokens=8, messages=messages, tools=TOOLS),
        "toolu_answers_nothing",
    )


def error_tool_choice_names_no_tool(client, model):
    return bad_request(
        lambda: client.messages.create(
            model=model,
            max_tokens=8,
            messages=ASK_WEATHER,
            tools=TOOLS,
            tool_choice={"type": "tool", "name": "no_such_tool"},
        ),
        "no_such_tool",
    )


def error_schema_not_json_schema(client, model):
    broken = {"name": "broken_tool", "input_schema": {"type": "banana", "properties": 7}}
    return bad_request(
        lambda: client.messages.create(model=model, max_tokens=8, messages=ASK_WEATHER, tools=[broken]),
        "broken_tool",
        "banana",
    )


def error_image_not_supported(client, model):
    # A 1x1 PNG.
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    content = [{"type": "text", "text": "What is in this picture?"}, image]
    return bad_request(
        lambda: client.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": content}]),
        "images",
    )


def error_prompt_too_long(client, model):
    # About 20,000 tokens against the test server's 4,096: refused whole, never cut, and
    # streamed or not the same 400 (the stream starts only once the model does).
    messages = [{"role": "user", "content": "apple " * 20_000}]
    plain = bad_request(
        lambda: client.messages.create(model=model, max_tokens=8, messages=messages), "--ctx-size"
    )

    def streamed():
        with client.messages.stream(model=model, max_tokens=8, messages=messages) as stream:
            for _ in stream:
                pass

    return {"plain": plain, "streamed": bad_request(streamed, "--ctx-size")}


def error_wrong_key(client, model):
    wrong = client.with_options(api_key="not-the-key")
    return refused(
        anthropic.AuthenticationError,
        "authentication_error",
        lambda: wrong.messages.create(model=model, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]),
        "x-api-key",
    )


CHECKS = [
    plain_message,
    streamed_message,
    stop_sequence,
    forced_tool_call,
    tool_result_round_trip,
    streamed_tool_call,
    tool_choice_any,
    structured_output,
    error_unknown_model,
    error_tool_result_answers_nothing,
    error_tool_choice_names_no_tool,
    error_schema_not_json_schema,
    error_image_not_supported,
    error_prompt_too_long,
    error_wrong_key,
]


def main():
    checks.run(
        CHECKS,
        lambda base_url, api_key: anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=300),
    )


if __name__ == "__main__":
    main()
