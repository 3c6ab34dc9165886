"""Passages: never across a heading, about the target size, overlapping within a section, each with
its page and heading path."""

import itertools

import pytest

from config.tokens import estimate_tokens
from documents.chunking import chunk, chunk_size_for, split_long, tail
from documents.extract import Block


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i:04d}" for i in range(start, start + n)) + "."


def test_small_paragraphs_of_one_section_make_one_chunk_with_its_heading_path():
    blocks = [Block("Alpha.", page=1, headings=("Guide", "Start")), Block("Beta.", page=1, headings=("Guide", "Start"))]
    (piece,) = chunk(blocks, target=100, overlap=10)
    assert (piece.text, piece.page, piece.heading) == ("Alpha.\n\nBeta.", 1, "Guide / Start")
    assert piece.tokens == estimate_tokens(piece.text)


def test_a_new_heading_starts_a_new_chunk_without_overlap():
    blocks = [Block("Under one.", headings=("One",)), Block("Under two.", headings=("Two",))]
    pieces = chunk(blocks, target=100, overlap=10)
    assert [(p.text, p.heading) for p in pieces] == [("Under one.", "One"), ("Under two.", "Two")]


def test_chunks_stay_under_the_target_and_neighbours_overlap():
    blocks = [Block(words(30, 30 * i), page=1) for i in range(6)]  # ~46 tokens each, one page
    pieces = chunk(blocks, target=100, overlap=20)
    assert len(pieces) >= 3
    assert all(p.tokens <= 100 for p in pieces)
    for before, after in itertools.pairwise(pieces):
        assert after.text.split("\n\n")[0] in before.text  # begins with the end of the one before
    everything = " ".join(p.text for p in pieces)
    assert all(f"w{i:04d}" in everything for i in range(180))  # nothing lost


def test_a_chunk_is_all_on_its_page_with_no_overlap_from_the_page_before():
    blocks = [Block(words(40, 0), page=1), Block(words(40, 40), page=2), Block(words(40, 80), page=3)]
    pieces = chunk(blocks, target=70, overlap=10)
    assert [p.page for p in pieces] == [1, 2, 3]
    assert "w0080" in pieces[2].text and "w0079" not in pieces[2].text


def test_short_pages_are_not_merged_so_a_citation_names_the_page_of_its_passage():
    # Three short pages of one section would fit one chunk; the fact on page 3 must be cited as page 3.
    blocks = [Block(f"Chapter {n}. Fact {n}.", page=n) for n in (1, 2, 3)]
    pieces = chunk(blocks, target=400, overlap=50)
    assert [p.page for p in pieces] == [1, 2, 3]
    assert [p.text for p in pieces] == ["Chapter 1. Fact 1.", "Chapter 2. Fact 2.", "Chapter 3. Fact 3."]


def test_a_paragraph_longer_than_the_target_is_cut_at_sentences_then_words():
    long = " ".join(f"Sentence number {i} has a few words." for i in range(60))
    parts = split_long(long, 50)
    assert all(estimate_tokens(p) <= 50 for p in parts) and len(parts) > 1
    assert all(p.endswith(".") for p in parts)  # cut at sentence ends
    no_stops = "x" * 1000
    parts = split_long(no_stops, 30)
    assert "".join(parts) == no_stops and all(estimate_tokens(p) <= 30 for p in parts)


def test_tail_prefers_whole_sentences():
    assert tail("First one here. Second one. Third.", 5) == "Second one. Third."
    assert tail("no stops at all in this text", 3) == "in this text"
    assert tail("anything", 0) == ""


def test_chunk_size_follows_the_embedding_window():
    assert chunk_size_for(None) == (400, 50)
    assert chunk_size_for(256) == (128, 32)
    with pytest.raises(ValueError, match="overlap"):
        chunk([Block("x")], target=10, overlap=10)
