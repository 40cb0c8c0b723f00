"""Talks to a running `catena serve` with the official OpenAI Python client, the way any user's
script would, and prints one JSON object with what it saw. The Rust end-to-end test starts the
server, runs this, and checks the result.

usage: openai_client.py BASE_URL MODEL API_KEY
"""

import json
import sys
import urllib.error
import urllib.request

import openai

base_url, model, api_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
out = {}

models = client.models.list()
out["models"] = [m.id for m in models.data]

# Not streamed.
reply = client.chat.completions.create(
    model=model,
    messages=[
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Say hello in one word."},
    ],
    max_tokens=16,
    temperature=0,
    seed=1,
)
out["plain"] = {
    "object": reply.object,
    "content": reply.choices[0].message.content,
    "role": reply.choices[0].message.role,
    "finish_reason": reply.choices[0].finish_reason,
    "usage": reply.usage.model_dump(),
}

# Streamed, with usage at the end.
pieces, finish, usage = [], None, None
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Count from 1 to 5, separated by spaces."}],
    max_tokens=24,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
out["stream"] = {"pieces": len(pieces), "content": "".join(pieces), "finish_reason": finish, "usage": usage}

# A stop sequence is not part of the reply.
stopped = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Write the letters a b c d e f g, separated by spaces."}],
    max_tokens=32,
    temperature=0,
    stop=["d"],
)
out["stop"] = {"content": stopped.choices[0].message.content, "finish_reason": stopped.choices[0].finish_reason}

# A frequency penalty lowers each token by how often it came before (greedy, so the two replies
# differ only by it).
def cats(**penalty):
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write the word cat ten times, separated by spaces."}],
        max_tokens=40,
        temperature=0,
        **penalty,
    )
    return reply.choices[0].message.content


out["penalties"] = {"none": cats(), "frequency": cats(frequency_penalty=2.0)}

# Two turns of one conversation: the second re-evaluates only the new tokens.
history = [{"role": "user", "content": "My name is Ada. Reply with OK."}]
first = client.chat.completions.create(model=model, messages=history, max_tokens=8, temperature=0)
history.append({"role": "assistant", "content": first.choices[0].message.content})
history.append({"role": "user", "content": "What is my name? One word."})
second = client.chat.completions.create(model=model, messages=history, max_tokens=8, temperature=0)
out["turns"] = [first.usage.model_dump(), second.usage.model_dump()]

# Errors, as the client raises them.
def error_of(call):
    try:
        call()
    except openai.APIStatusError as e:
        return {"status": e.status_code, "body": e.body, "class": type(e).__name__}
    return None

out["unknown_model"] = error_of(
    lambda: client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
)
out["bad_key"] = error_of(
    lambda: openai.OpenAI(base_url=base_url, api_key="wrong-key", max_retries=0).models.list()
)
out["empty_messages"] = error_of(lambda: client.chat.completions.create(model=model, messages=[]))
# What the server does not do is refused, not ignored; a value out of OpenAI's range too.
hi = [{"role": "user", "content": "hi"}]
out["logprobs"] = error_of(
    lambda: client.chat.completions.create(model=model, messages=hi, max_tokens=4, logprobs=True, top_logprobs=2)
)
out["logit_bias"] = error_of(
    lambda: client.chat.completions.create(model=model, messages=hi, max_tokens=4, logit_bias={"15": 5})
)
out["penalty_range"] = error_of(
    lambda: client.chat.completions.create(model=model, messages=hi, max_tokens=4, presence_penalty=2.5)
)
out["response_image"] = error_of(
    lambda: client.responses.create(
        model=model,
        max_output_tokens=4,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is in this picture?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
                ],
            }
        ],
    )
)
out["response_logprobs"] = error_of(
    lambda: client.responses.create(
        model=model, input="hi", max_output_tokens=4, include=["message.output_text.logprobs"]
    )
)


def raw(path, body, content_type="application/json"):
    request = urllib.request.Request(
        base_url + path,
        data=body,
        headers={"Content-Type": content_type, "Authorization": "Bearer " + api_key},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return {"status": response.status, "body": json.loads(response.read())}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": json.loads(e.read())}


out["malformed_json"] = raw("/chat/completions", b'{"model": "x", "messages": [')
out["oversized"] = raw(
    "/chat/completions",
    json.dumps({"model": model, "messages": [{"role": "user", "content": "x" * (3 << 20)}]}).encode(),
)
print(json.dumps(out))
