"""How the shipped training prompts (prompts.jsonl beside this file) are made.

`python -m omlx.draft.train.prompt_templates` rewrites prompts.jsonl. Every prompt is a
template filled from a topic list, in four categories that cover what a chat model is
asked: chat (explanations, advice, opinions), code (write, explain and fix programs in
several languages), maths (arithmetic, algebra, word problems with fresh numbers) and
instructions (rewrite, summarise, list, translate, write letters and stories). The
random choices are seeded, so the file is the same on every run; about one prompt in
twelve of each category is marked "heldout" and is never trained on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

SEED = 20261204
HELDOUT_EVERY = 12
PROMPTS_FILE = Path(__file__).with_name("prompts.jsonl")

TOPICS = [
    "photosynthesis",
    "black holes",
    "the French Revolution",
    "inflation",
    "vaccines",
    "machine learning",
    "the water cycle",
    "plate tectonics",
    "the stock market",
    "climate change",
    "the immune system",
    "democracy",
    "the Roman Empire",
    "gravity",
    "electric cars",
    "the internet",
    "DNA",
    "volcanoes",
    "the Renaissance",
    "sleep",
    "coffee",
    "meditation",
    "the moon landing",
    "recycling",
    "honey bees",
    "rainbows",
    "compound interest",
    "the printing press",
    "antibiotics",
    "solar panels",
    "the human heart",
    "earthquakes",
    "blockchains",
    "the Silk Road",
    "jazz",
    "the Olympic Games",
    "supply and demand",
    "tides",
    "quantum computers",
    "dinosaurs",
    "the Great Wall of China",
    "nuclear power",
    "social media",
    "the ozone layer",
    "evolution",
    "chess",
    "batteries",
    "the theory of relativity",
    "coral reefs",
    "public libraries",
    "bread baking",
    "the periodic table",
    "hurricanes",
    "music theory",
    "ancient Egypt",
    "remote work",
    "password security",
    "the speed of light",
    "bicycles",
    "rain forests",
    "the human brain",
    "video games",
    "minimum wage",
    "Shakespeare",
]
AUDIENCES = [
    "a ten-year-old",
    "a high school student",
    "a busy manager",
    "my grandmother",
    "a software engineer",
    "someone who has never heard of it",
]
SITUATIONS = [
    "starting a new job",
    "learning a second language",
    "moving to a new city",
    "saving money each month",
    "preparing for a job interview",
    "getting better sleep",
    "keeping a plant alive",
    "running a first marathon",
    "making friends as an adult",
    "asking for a raise",
    "studying for an exam",
    "planning a small wedding",
    "dealing with a noisy neighbour",
    "starting to cook at home",
    "training a puppy",
    "writing a first novel",
    "staying focused while working from home",
    "choosing a laptop",
    "reducing screen time",
    "organising a team meeting",
]
THINGS = [
    "working from home",
    "electric cars",
    "nuclear energy",
    "online learning",
    "living in a big city",
    "owning a dog",
    "social media",
    "renting versus buying a home",
    "open source software",
    "a four-day work week",
    "public transport",
    "learning to code",
    "freelancing",
    "solar power",
    "paper books versus e-readers",
]
CHAT_TEMPLATES = [
    "Explain {topic} to {audience}.",
    "What do you know about {topic}, and why does it matter?",
    "Tell me three interesting facts about {topic}.",
    "How would you describe {topic} in simple words?",
    "What are common misconceptions about {topic}?",
    "Give me some advice on {situation}.",
    "I'm nervous about {situation}. Any tips?",
    "What are the pros and cons of {thing}?",
    "Is {thing} a good idea? Give a balanced answer.",
    "Hi! Can you help me understand {topic}?",
    "What should I know before {situation}?",
    "Why do people disagree about {thing}?",
]

CODE_TASKS = [
    "reverses a string",
    "checks whether a number is prime",
    "returns the n-th Fibonacci number",
    "counts the vowels in a string",
    "finds the largest element of a list",
    "removes duplicates from a list",
    "checks whether a string is a palindrome",
    "sorts a list with bubble sort",
    "computes the factorial of n",
    "merges two sorted lists",
    "converts Celsius to Fahrenheit",
    "counts the words in a text",
    "finds the greatest common divisor of two numbers",
    "flattens a nested list",
    "returns the sum of the digits of a number",
    "checks whether two strings are anagrams",
    "implements binary search",
    "reads a CSV file and prints each row",
    "computes the average of a list of numbers",
    "capitalises every word in a sentence",
    "generates all subsets of a list",
    "transposes a matrix",
    "counts how often each character appears in a string",
    "validates an email address",
    "finds the second largest number in a list",
    "rotates a list by k positions",
    "converts a decimal number to binary",
    "checks whether a year is a leap year",
    "implements a stack with push and pop",
    "returns the n first prime numbers",
]
LANGUAGES = ["Python", "JavaScript", "Rust", "Go", "C", "Java", "TypeScript", "Bash"]
CODE_SNIPPETS = [
    "def f(xs):\n    return [x * 2 for x in xs if x % 2 == 0]",
    "for i in range(1, 16):\n    print('FizzBuzz' if i % 15 == 0 else i)",
    "const add = (a, b) => a + b;\nconsole.log(add(2, 3));",
    "SELECT name, COUNT(*) FROM orders GROUP BY name ORDER BY 2 DESC;",
    "def g(n):\n    return n if n < 2 else g(n - 1) + g(n - 2)",
    "x = {k: v for k, v in zip('abc', range(3))}",
    "while True:\n    line = input()\n    if not line:\n        break\n    print(line.upper())",
    "int max(int a, int b) { return a > b ? a : b; }",
    "words = text.split()\nprint(sorted(set(words), key=len))",
    "let total = 0;\nfor (const n of [1, 2, 3]) { total += n; }",
]
BUGGY_SNIPPETS = [
    "def average(xs):\n    return sum(xs) / len(xs) + 1",
    "def is_even(n):\n    return n % 2 == 1",
    "for i in range(10)\n    print(i)",
    "def last(xs):\n    return xs[len(xs)]",
    "def greet(name):\n    print('Hello, ' + nam)",
    "numbers = [1, 2, 3]\nprint(numbers.length)",
]
CODE_TEMPLATES = [
    "Write a Python function that {task}.",
    "Write a {lang} function that {task}.",
    "How do I write a program in {lang} that {task}?",
    "Show me a short {lang} example that {task}, with comments.",
    "Write a Python function that {task}, and add a docstring and a test.",
]
CODE_EXPLAIN_TEMPLATES = [
    "Explain what this code does:\n\n{snippet}",
    "What does the following code print or return?\n\n{snippet}",
]
CODE_FIX_TEMPLATES = [
    "Find and fix the bug in this code:\n\n{snippet}",
    "This code does not work. Why?\n\n{snippet}",
]

NAMES = ["Ana", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack"]
ITEMS = ["apples", "pencils", "books", "marbles", "cookies", "stickers", "oranges", "cards"]


def _maths(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    name, other, item = rng.choice(NAMES), rng.choice(NAMES), rng.choice(ITEMS)
    templates = [
        f"What is {a} + {b} * {c}?",
        f"Compute {a * c} divided by {c}, then add {b}.",
        f"Solve for x: {c}x + {a} = {a + c * b}.",
        f"What is {c * 5}% of {a * 10}?",
        f"Is {a * 2 + 1} a prime number? Explain.",
        f"{name} has {a} {item} and gives {min(a - 1, b)} to {other}. How many are left?",
        f"A train travels {a * 10} km in {c} hours. What is its average speed?",
        f"What is the area of a rectangle {a} cm long and {c} cm wide?",
        f"Find the least common multiple of {c} and {b}.",
        f"{name} saves {c} dollars a week. How many weeks until {name} has {c * a} dollars?",
        f"Simplify the fraction {a * c}/{b * c}.",
        f"What is the square of {a}? Show your steps.",
        f"If a shirt costs {a} dollars and is {c * 5}% off, what is the new price?",
        f"Convert {a * 100} minutes into hours and minutes.",
        f"What is the perimeter of a square with sides of {b} metres?",
        f"Solve the system: x + y = {a + b}, x - y = {a - b}.",
        f"What is the mean of {a}, {b} and {c}?",
        f"Expand (x + {c})(x - {c}).",
        f"A recipe needs {c} eggs for {b % 5 + 2} people. How many eggs for {a % 9 + 3} people?",
        f"What is {a} squared minus {b} squared?",
    ]
    return rng.choice(templates)


SENTENCES = [
    "The committee approved the new budget after a long debate.",
    "Our team finished the project two weeks ahead of schedule.",
    "The old library on Main Street will close for renovations next month.",
    "Scientists discovered a new species of frog in the rain forest.",
    "The weather was so cold that the lake froze overnight.",
    "She learned to play the piano by watching online videos.",
    "The company will launch its new phone in September.",
    "Heavy rain caused delays on every train line this morning.",
    "He forgot his umbrella, so he got soaked on the way home.",
    "The museum is offering free entry to students on Fridays.",
]
RECIPIENTS = [
    "my landlord",
    "a colleague",
    "my manager",
    "a customer",
    "my neighbour",
    "the school principal",
    "a hiring manager",
    "an old friend",
]
MATTERS = [
    "a broken heater",
    "a meeting next week",
    "taking a day off",
    "a late delivery",
    "a noise complaint",
    "a job application",
    "a thank-you for their help",
    "rescheduling an appointment",
]
INSTRUCTION_TEMPLATES = [
    "Rewrite this sentence in the passive voice: {sentence}",
    "Translate into French: {sentence}",
    "Translate into Spanish: {sentence}",
    "Make this sentence more formal: {sentence}",
    "Summarise in one line: {sentence}",
    "Write a short poem about {topic}.",
    "Write a haiku about {topic}.",
    "Write a short story for children about {topic}.",
    "List five facts about {topic}.",
    "Give me a numbered list of steps for {situation}.",
    "Write an email to {recipient} about {matter}.",
    "Write a polite text message to {recipient} about {matter}.",
    "Write a product description for a {item} made of recycled materials.",
    "Write a tweet announcing a talk about {topic}.",
    "Create a quiz with three questions about {topic}.",
    "Give me a title and an outline for an essay on {topic}.",
]
INSTRUCTION_ITEMS = ["backpack", "water bottle", "desk lamp", "notebook", "chair", "jacket"]


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """What a prompt set is filled from: the templates of each category and the lists
    their fields draw on (shipped: the lists above; prompt_templates_more adds to them)."""

    chat_templates: tuple[str, ...]
    code_templates: tuple[str, ...]
    code_explain_templates: tuple[str, ...]
    code_fix_templates: tuple[str, ...]
    instruction_templates: tuple[str, ...]
    topics: tuple[str, ...]
    audiences: tuple[str, ...]
    situations: tuple[str, ...]
    things: tuple[str, ...]
    code_tasks: tuple[str, ...]
    languages: tuple[str, ...]
    code_snippets: tuple[str, ...]
    buggy_snippets: tuple[str, ...]
    sentences: tuple[str, ...]
    recipients: tuple[str, ...]
    matters: tuple[str, ...]
    items: tuple[str, ...]
    maths: Callable[[random.Random], str]


SHIPPED = Vocabulary(
    chat_templates=tuple(CHAT_TEMPLATES),
    code_templates=tuple(CODE_TEMPLATES),
    code_explain_templates=tuple(CODE_EXPLAIN_TEMPLATES),
    code_fix_templates=tuple(CODE_FIX_TEMPLATES),
    instruction_templates=tuple(INSTRUCTION_TEMPLATES),
    topics=tuple(TOPICS),
    audiences=tuple(AUDIENCES),
    situations=tuple(SITUATIONS),
    things=tuple(THINGS),
    code_tasks=tuple(CODE_TASKS),
    languages=tuple(LANGUAGES),
    code_snippets=tuple(CODE_SNIPPETS),
    buggy_snippets=tuple(BUGGY_SNIPPETS),
    sentences=tuple(SENTENCES),
    recipients=tuple(RECIPIENTS),
    matters=tuple(MATTERS),
    items=tuple(INSTRUCTION_ITEMS),
    maths=_maths,
)


def _fill(template: str, rng: random.Random, v: Vocabulary) -> str:
    # Every field is drawn whether the template uses it or not: the shipped file depends
    # on this exact sequence of random draws.
    return template.format(
        topic=rng.choice(v.topics),
        audience=rng.choice(v.audiences),
        situation=rng.choice(v.situations),
        thing=rng.choice(v.things),
        task=rng.choice(v.code_tasks),
        lang=rng.choice(v.languages),
        snippet=rng.choice(v.code_snippets),
        sentence=rng.choice(v.sentences),
        recipient=rng.choice(v.recipients),
        matter=rng.choice(v.matters),
        item=rng.choice(v.items),
    )


def _code(rng: random.Random, v: Vocabulary) -> str:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(v.code_explain_templates).format(snippet=rng.choice(v.code_snippets))
    if roll < 0.25:
        return rng.choice(v.code_fix_templates).format(snippet=rng.choice(v.buggy_snippets))
    return _fill(rng.choice(v.code_templates), rng, v)


COUNTS = {"chat": 700, "code": 600, "maths": 600, "instructions": 500}


def build(
    seed: int = SEED,
    vocab: Vocabulary = SHIPPED,
    counts: dict[str, int] | None = None,
    *,
    exclude: Collection[str] = (),
    id_prefix: str = "",
    heldout_every: int | None = HELDOUT_EVERY,
) -> list[dict[str, str]]:
    """Every prompt once: {"id", "category", "split", "prompt"}; none of `exclude`, and
    every `heldout_every`-th of a category held out (None: all are training prompts)."""
    rng = random.Random(seed)
    makers = {
        "chat": lambda: _fill(rng.choice(vocab.chat_templates), rng, vocab),
        "code": lambda: _code(rng, vocab),
        "maths": lambda: vocab.maths(rng),
        "instructions": lambda: _fill(rng.choice(vocab.instruction_templates), rng, vocab),
    }
    records = []
    for category, count in (counts or COUNTS).items():
        seen: set[str] = set()
        for _ in range(count * 20):
            if len(seen) == count:
                break
            prompt = makers[category]()
            if prompt in seen or prompt in exclude:
                continue
            seen.add(prompt)
            n = len(seen)
            held = heldout_every is not None and n % heldout_every == 0
            records.append(
                {
                    "id": f"{id_prefix}{category}-{n:04d}",
                    "category": category,
                    "split": "heldout" if held else "train",
                    "prompt": prompt,
                }
            )
    return records


def write_prompts(path: Path, records: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"wrote {len(records)} prompts to {path}")


def main() -> None:
    write_prompts(PROMPTS_FILE, build())


if __name__ == "__main__":
    main()
