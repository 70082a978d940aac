"""More training prompts (prompts_more.jsonl): the shipped set's four categories, wider.

A draft trained on the 2,201 shipped training prompts stops improving on held-out ones
long before it has learnt the target (runs 6-7 on SmolLM2: more sampled replies to the
same prompts add less each pass). New prompts add new contexts, which is what it lacks.
This set draws on the shipped lists plus as many again (topics, tasks, languages,
situations, templates and maths questions), never repeats a shipped prompt, and holds no
held-out prompts: the held-out split stays the shipped set's, so τ measured on it stays
comparable across runs. `omlx draft train --prompts more` writes its replies;
`--extra-data` trains on them beside the shipped set's.

`python -m omlx.draft.train.prompt_templates_more` rewrites the file (seeded, stable).
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from omlx.draft.train.prompt_templates import NAMES, SHIPPED, build, write_prompts

SEED = 20261205
MORE_PROMPTS_FILE = Path(__file__).with_name("prompts_more.jsonl")
COUNTS = {"chat": 2100, "code": 1800, "maths": 1800, "instructions": 1500}

TOPICS = (
    "the Industrial Revolution",
    "photography",
    "the Amazon river",
    "glaciers",
    "tsunamis",
    "the human eye",
    "bacteria",
    "the Cold War",
    "the Pyramids",
    "oceans",
    "wind turbines",
    "artificial intelligence",
    "cryptography",
    "the Moon",
    "Mars",
    "comets",
    "fungi",
    "migrating birds",
    "the metric system",
    "the Vikings",
    "the Aztecs",
    "the Byzantine Empire",
    "opera",
    "impressionist painting",
    "the violin",
    "football",
    "yoga",
    "nutrition",
    "allergies",
    "the placebo effect",
    "memory",
    "dreams",
    "languages",
    "the alphabet",
    "maps",
    "time zones",
    "calendars",
    "money",
    "taxes",
    "banks",
    "insurance",
    "electricity",
    "magnets",
    "sound waves",
    "light bulbs",
    "telescopes",
    "microscopes",
    "3D printing",
    "robots",
    "satellites",
    "GPS",
    "the cloud",
    "email",
    "open source",
    "databases",
    "compilers",
    "operating systems",
    "spreadsheets",
    "bees",
    "whales",
    "octopuses",
    "elephants",
    "wolves",
    "forests",
    "deserts",
    "soil",
    "compost",
    "weather forecasts",
    "lightning",
    "snowflakes",
    "the seasons",
    "the Sahara",
    "Antarctica",
    "the Arctic",
    "the Olympics of ancient Greece",
    "Greek myths",
    "philosophy",
    "ethics",
    "logic",
    "statistics",
    "probability",
    "game theory",
    "architecture",
    "bridges",
    "skyscrapers",
    "trains",
    "airplanes",
    "ships",
    "the postal service",
    "newspapers",
    "podcasts",
    "film making",
    "animation",
    "origami",
    "knitting",
    "gardening",
    "tea",
    "chocolate",
    "cheese",
    "spices",
    "fermentation",
)
AUDIENCES = (
    "a five-year-old",
    "a university student",
    "a retired teacher",
    "a new employee",
    "a tourist",
    "a journalist",
    "a doctor",
    "an artist",
)
SITUATIONS = (
    "buying a first car",
    "learning to swim as an adult",
    "starting a podcast",
    "travelling alone for the first time",
    "giving a wedding speech",
    "quitting smoking",
    "learning to play the guitar",
    "starting a vegetable garden",
    "paying off a debt",
    "moving in with a partner",
    "adopting a cat",
    "changing careers at forty",
    "preparing for a long flight",
    "hosting a dinner party",
    "applying to university",
    "starting a small business",
    "learning to drive",
    "writing a CV",
    "running a book club",
    "teaching a child to read",
    "recovering from a cold",
    "planning a road trip",
    "negotiating a salary",
    "giving feedback to a colleague",
    "decluttering a flat",
)
THINGS = (
    "homeschooling",
    "self-driving cars",
    "space tourism",
    "vegetarian diets",
    "standing desks",
    "smart watches",
    "video calls",
    "cash-free shops",
    "school uniforms",
    "working night shifts",
    "e-scooters",
    "tiny houses",
    "learning Latin",
    "gap years",
    "streaming services",
    "cloud storage",
    "home assistants",
    "electric bikes",
    "online banking",
    "open-plan offices",
)
CHAT_TEMPLATES = (
    "Can you give me a short history of {topic}?",
    "What would change if {topic} did not exist?",
    "Explain how {topic} works, step by step.",
    "What is the most surprising thing about {topic}?",
    "I have to give a five-minute talk on {topic}. What should I cover?",
    "How is {topic} studied today?",
    "Compare {topic} with {thing} in a few sentences.",
    "My friend says {thing} is overrated. What do you think?",
    "How do I get started with {situation}?",
    "What mistakes do people make when {situation}?",
    "Can you explain {topic} as if I were {audience}?",
    "Write a short FAQ about {topic}.",
    "What questions should I ask myself before {situation}?",
    "In two paragraphs, what is {topic}?",
)
CODE_TASKS = (
    "counts the lines of a file",
    "parses a date string",
    "checks balanced parentheses",
    "computes a running average",
    "finds the longest word in a sentence",
    "converts a Roman numeral to an integer",
    "converts an integer to a Roman numeral",
    "computes the median of a list",
    "splits a list into chunks of size n",
    "reverses the words in a sentence",
    "finds the intersection of two lists",
    "computes the power set size of a list",
    "checks whether a list is sorted",
    "returns the most common element of a list",
    "implements a queue with two stacks",
    "computes the dot product of two vectors",
    "multiplies two matrices",
    "generates the first n rows of Pascal's triangle",
    "finds all prime factors of n",
    "checks whether a number is a perfect square",
    "implements insertion sort",
    "implements merge sort",
    "implements quicksort",
    "computes the Levenshtein distance",
    "encodes a string with a Caesar cipher",
    "counts the set bits of an integer",
    "removes whitespace from both ends of a string",
    "zips two lists into a dictionary",
    "groups words by their first letter",
    "finds the missing number in 1 to n",
    "converts a hexadecimal string to an integer",
    "computes compound interest",
    "validates a phone number",
    "builds a word frequency table",
    "finds the longest common prefix of a list of strings",
    "checks whether a graph has a cycle",
    "does a breadth-first search on a graph",
    "computes the n-th triangular number",
    "formats a number with thousands separators",
    "returns the days between two dates",
)
LANGUAGES = ("C++", "Ruby", "Kotlin", "Swift", "PHP", "C#", "Haskell", "Lua")
CODE_SNIPPETS = (
    "def h(s):\n    return s == s[::-1]",
    "nums = [3, 1, 2]\nnums.sort(reverse=True)\nprint(nums[0])",
    "function f(n) {\n  return n <= 1 ? 1 : n * f(n - 1);\n}",
    "fn main() {\n    let v: Vec<i32> = (1..=5).map(|x| x * x).collect();\n"
    '    println!("{:?}", v);\n}',
    "squares = list(map(lambda x: x ** 2, range(5)))",
    "def count(s):\n    return {c: s.count(c) for c in set(s)}",
    "UPDATE users SET active = 0 WHERE last_login < '2020-01-01';",
    'package main\nimport "fmt"\nfunc main() { fmt.Println(len("hello")) }',
    "try:\n    x = int('abc')\nexcept ValueError:\n    x = 0",
    "with open('data.txt') as f:\n    print(sum(1 for _ in f))",
)
BUGGY_SNIPPETS = (
    "def add_item(item, items=[]):\n    items.append(item)\n    return items",
    "total = 0\nfor i in range(1, 10):\n    total =+ i\nprint(total)",
    "def max_of(xs):\n    best = 0\n    for x in xs:\n"
    "        if x > best:\n            best = x\n    return best",
    "if x = 5:\n    print('five')",
    "def fact(n):\n    return n * fact(n - 1)",
    "let items = [1, 2, 3];\nfor (let i = 0; i <= items.length; i++) console.log(items[i]);",
)
CODE_TEMPLATES = (
    "Write a {lang} program that {task}.",
    "Write a function in {lang} that {task}, and explain how it works.",
    "Give me an efficient Python solution that {task}.",
    "Write a Python class with a method that {task}.",
    "What is the time complexity of a function that {task}? Show one in Python.",
    "Write unit tests in Python for a function that {task}.",
)
CODE_EXPLAIN_TEMPLATES = (
    "Walk me through this code line by line:\n\n{snippet}",
    "How could this code be improved?\n\n{snippet}",
)
CODE_FIX_TEMPLATES = (
    "What is wrong with this code, and how do I fix it?\n\n{snippet}",
    "Review this code and point out any bugs:\n\n{snippet}",
)
SENTENCES = (
    "The students planted twenty trees behind the school on Saturday.",
    "Our flight was cancelled, so we spent the night at the airport.",
    "The bakery on the corner sells out of bread before nine every morning.",
    "The city council voted to build a new cycle lane along the river.",
    "My brother fixed the old radio he found in our grandfather's attic.",
    "The concert was moved indoors because of the storm.",
    "The new manager asked everyone to share their ideas at the meeting.",
    "A small dog followed us all the way home from the park.",
    "The report shows that sales grew by ten percent last year.",
    "The hikers reached the top of the mountain just before sunset.",
)
RECIPIENTS = ("a supplier", "my bank", "a teacher", "a new client", "the council")
MATTERS = (
    "a refund",
    "a change of address",
    "a missed payment",
    "an invitation to a workshop",
    "feedback on a presentation",
    "a lost package",
)
INSTRUCTION_TEMPLATES = (
    "Translate into German: {sentence}",
    "Rewrite this sentence for a newspaper headline: {sentence}",
    "Turn this sentence into a question: {sentence}",
    "Write three different ways to say: {sentence}",
    "Write a limerick about {topic}.",
    "Write a short dialogue between two friends about {thing}.",
    "Write a motivational message for someone {situation}.",
    "Make a checklist for {situation}.",
    "Write a formal letter to {recipient} about {matter}.",
    "Write a short news report about {topic}.",
    "Explain {topic} in exactly three sentences.",
    "Write a riddle whose answer is {topic}.",
    "Give me five interview questions about {topic}.",
    "Write an advert for a {item} aimed at students.",
)
ITEMS = ("lunch box", "umbrella", "phone case", "travel mug", "bicycle helmet")


def _maths_more(rng: random.Random) -> str:
    """The shipped maths questions half the time, new kinds the other half."""
    if rng.random() < 0.5:
        return SHIPPED.maths(rng)
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    name = rng.choice(NAMES)
    templates = [
        f"What is {a * c} minus {b}, times {c}?",
        f"Solve for x: {a}x - {b} = {a * c - b}.",
        f"What is {a}% of {b * 20}?",
        f"Round {a}.{b:02d} to the nearest whole number and explain why.",
        f"Write {a * c} as a product of prime factors.",
        f"A car uses {c} litres of fuel per 100 km. How much for {a * 10} km?",
        f"{name} reads {c} pages a day. How long to read a {a * c} page book?",
        f"What is the circumference of a circle with radius {c} cm? Use pi = 3.14.",
        f"Convert {a * 3} feet into yards and feet.",
        f"What is the next number: {c}, {2 * c}, {4 * c}, {8 * c}, ...?",
        f"Find the greatest common divisor of {a * c} and {b * c}.",
        f"How many seconds are there in {c} hours and {b} minutes?",
        f"A price rose from {a * 10} to {a * 10 + b} dollars. What is the percentage rise?",
        f"What is the volume of a cube with edges of {c} cm?",
        f"If {c} workers build a wall in {a} days, how long would {2 * c} workers take?",
        f"Is {a * b} divisible by {c}? Show how you check.",
        f"Solve x^2 = {a * a}.",
        f"What is 1/{c} + 1/{c * 2} as a fraction?",
    ]
    return rng.choice(templates)


def _wider(shipped: tuple[str, ...], added: tuple[str, ...]) -> tuple[str, ...]:
    return shipped + tuple(x for x in added if x not in shipped)


MORE = replace(
    SHIPPED,
    chat_templates=_wider(SHIPPED.chat_templates, CHAT_TEMPLATES),
    code_templates=_wider(SHIPPED.code_templates, CODE_TEMPLATES),
    code_explain_templates=_wider(SHIPPED.code_explain_templates, CODE_EXPLAIN_TEMPLATES),
    code_fix_templates=_wider(SHIPPED.code_fix_templates, CODE_FIX_TEMPLATES),
    instruction_templates=_wider(SHIPPED.instruction_templates, INSTRUCTION_TEMPLATES),
    topics=_wider(SHIPPED.topics, TOPICS),
    audiences=_wider(SHIPPED.audiences, AUDIENCES),
    situations=_wider(SHIPPED.situations, SITUATIONS),
    things=_wider(SHIPPED.things, THINGS),
    code_tasks=_wider(SHIPPED.code_tasks, CODE_TASKS),
    languages=_wider(SHIPPED.languages, LANGUAGES),
    code_snippets=_wider(SHIPPED.code_snippets, CODE_SNIPPETS),
    buggy_snippets=_wider(SHIPPED.buggy_snippets, BUGGY_SNIPPETS),
    sentences=_wider(SHIPPED.sentences, SENTENCES),
    recipients=_wider(SHIPPED.recipients, RECIPIENTS),
    matters=_wider(SHIPPED.matters, MATTERS),
    items=_wider(SHIPPED.items, ITEMS),
    maths=_maths_more,
)


def build_more() -> list[dict[str, str]]:
    """The more-prompts set: no shipped prompt, none held out."""
    shipped = {r["prompt"] for r in build()}
    return build(SEED, MORE, COUNTS, exclude=shipped, id_prefix="more-", heldout_every=None)


def main() -> None:
    write_prompts(MORE_PROMPTS_FILE, build_more())


if __name__ == "__main__":
    main()
