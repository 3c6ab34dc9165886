"""A small agent loop written with the OpenAI Agents SDK runs to its end against the product: the
model must call the tool, the SDK runs it and sends the result back, and the model answers."""

import asyncio

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI


def test_an_agent_calls_its_tool_and_finishes(api):
    base_url, key = api
    set_tracing_disabled(True)  # traces go to OpenAI's servers by default
    looked_up: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        looked_up.append(city)
        return f"It is 18 degrees and sunny in {city}."

    async def scenario():
        client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
        agent = Agent(
            name="Weather",
            instructions="Answer questions about the weather with the get_weather tool.",
            model=OpenAIChatCompletionsModel(model="sim-small", openai_client=client),
            tools=[get_weather],
        )
        try:
            return await Runner.run(agent, "What is the weather in Paris? Use get_weather.", max_turns=4)
        finally:
            await client.close()

    result = asyncio.run(scenario())
    assert looked_up and isinstance(looked_up[0], str)
    assert isinstance(result.final_output, str) and result.final_output
