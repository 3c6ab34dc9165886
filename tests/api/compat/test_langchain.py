"""`langchain-openai`, unchanged: `bind_tools` with a ToolMessage round trip, and
`with_structured_output` with each of its three methods."""

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel, Field

from accounts.api_keys import create_api_key
from tests.api.conftest import EMBED
from tests.support.plans import put_on_plan


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"18 degrees and sunny in {city}"


class Movie(BaseModel):
    """A film and the year it came out."""

    title: str = Field(description="The film's title")
    year: int = Field(description="The year it came out")


@pytest.fixture
def chat(api):
    base_url, key = api
    return ChatOpenAI(model="sim-small", base_url=base_url, api_key=key, max_retries=0, timeout=120, seed=7)


def test_bind_tools_and_a_tool_message_round_trip(chat):
    model = chat.bind_tools([get_weather])
    question = HumanMessage("What is the weather in Paris? Use get_weather.")
    asked = model.invoke([question])
    [call] = asked.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)

    result = get_weather.invoke(call["args"])
    answered = model.invoke([question, asked, ToolMessage(result, tool_call_id=call["id"])])
    assert answered.content and not answered.tool_calls
    assert answered.response_metadata["finish_reason"] == "stop"


def test_streamed_tool_calls_are_assembled_by_langchain(chat):
    model = chat.bind_tools([get_weather], tool_choice="get_weather")
    merged = None
    for piece in model.stream("Weather in Oslo?"):
        merged = piece if merged is None else merged + piece
    [call] = merged.tool_calls
    assert call["name"] == "get_weather" and call["args"]["city"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_structured_output_returns_the_pydantic_object(chat, method):
    movie = chat.with_structured_output(Movie, method=method).invoke("Name a film from the nineties.")
    assert isinstance(movie, Movie) and movie.title


def test_structured_output_in_json_mode_returns_parsed_json(chat):
    schema = {"title": "movie", "type": "object", "properties": {"title": {"type": "string"}}}
    result = chat.with_structured_output(schema, method="json_mode").invoke("A film as JSON, please.")
    assert isinstance(result, dict)


def test_embeddings_rank_the_related_text_first(transactional_db, embed_server, user):
    put_on_plan(user, "pro")
    _, key = create_api_key(user, "langchain embeddings")
    # check_embedding_ctx_length=False: LangChain would otherwise cut texts with OpenAI's own tokenizer
    # (tiktoken), which is neither this model's nor downloadable here; the server counts the tokens.
    embeddings = OpenAIEmbeddings(
        model=EMBED, base_url=embed_server.base_url + "/v1", api_key=key, check_embedding_ctx_length=False
    )
    documents = ["The lighthouse keeper trims the lamp", "Stock markets fell sharply today"]
    vectors = embeddings.embed_documents(documents)
    query = embeddings.embed_query("Who trims the lighthouse lamp?")

    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert len(vectors) == 2 and len(query) == len(vectors[0])
    assert cosine(query, vectors[0]) > cosine(query, vectors[1])


def test_an_over_long_prompt_raises_langchains_context_overflow(chat):
    from langchain_core.exceptions import ContextOverflowError

    with pytest.raises(ContextOverflowError):
        chat.invoke([HumanMessage("x" * 200_000)])
