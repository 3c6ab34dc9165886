// The JavaScript `openai` package, unmodified: a tool call and a streamed answer against /v1.
// Prints one JSON object with what the program got back; tests/api/compat/test_openai_js.py checks it.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0 });
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const question = [{ role: "user", content: "What is the weather in Lisbon? Use get_weather." }];

const asked = await client.chat.completions.create({ model: "sim-small", messages: question, tools: [weather] });
const call = asked.choices[0].message.tool_calls[0];
const answered = await client.chat.completions.create({
  model: "sim-small",
  tools: [weather],
  messages: [...question, asked.choices[0].message, { role: "tool", tool_call_id: call.id, content: "21 C, clear" }],
});

const stream = await client.chat.completions.create({
  model: "sim-small",
  messages: [{ role: "user", content: "Say hello." }],
  max_tokens: 20,
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let pieces = 0;
let usage = null;
for await (const chunk of stream) {
  const delta = chunk.choices[0]?.delta?.content;
  if (delta) {
    text += delta;
    pieces += 1;
  }
  if (chunk.usage) usage = chunk.usage;
}

const streamedCall = client.chat.completions.stream({
  model: "sim-small",
  messages: question,
  tools: [weather],
  tool_choice: "required",
});
const final = await streamedCall.finalChatCompletion();

console.log(
  JSON.stringify({
    finish: asked.choices[0].finish_reason,
    name: call.function.name,
    arguments: JSON.parse(call.function.arguments),
    answer: answered.choices[0].message.content,
    streamed: { text, pieces, usage },
    streamed_call: final.choices[0].message.tool_calls[0].function,
  }),
);
