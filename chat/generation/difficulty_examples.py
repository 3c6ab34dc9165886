"""Labelled example turns for Auto's difficulty estimate (chat.generation.difficulty): what a small
model answers as well as a large one ("easy"), and what it does not ("hard"). Written for this product
by its developers, in the spread of a general assistant's traffic (facts, definitions, small rewrites and
conversions; code, proofs, analysis, design, long structured writing). The bench's workload phase and
the tests hold out part of them to measure the estimate; they are not a benchmark of any model."""

EASY = [
    "What is the capital of Australia?",
    "hi",
    "Hello! How are you today?",
    "Thanks, that helped.",
    "Who wrote Pride and Prejudice?",
    "How many days are there in a leap year?",
    "Translate 'good morning' into Spanish.",
    "What does HTTP stand for?",
    "Define photosynthesis in one sentence.",
    "What is the boiling point of water in Fahrenheit?",
    "Give me a synonym for happy.",
    "Convert 5 miles to kilometres.",
    "What year did the Berlin Wall fall?",
    "Spell 'necessary' for me.",
    "What's the plural of cactus?",
    "Is a tomato a fruit or a vegetable?",
    "Who painted the Mona Lisa?",
    "What time zone is Tokyo in?",
    "Recommend a good name for a goldfish.",
    "What is 15% of 80?",
    "How do you say thank you in Japanese?",
    "What's the chemical symbol for gold?",
    "Tell me a short joke about cats.",
    "What is the tallest mountain in the world?",
    "Fix the spelling: 'I recieved the pakage yesterday'.",
    "What does 'ephemeral' mean?",
    "Which planet is closest to the sun?",
    "Make this sound friendlier: 'Send me the report.'",
    "Capitalize this title: the old man and the sea",
    "Is 17 a prime number?",
    "List three primary colours.",
    "What is the currency of Switzerland?",
    "How many ounces are in a pound?",
    "Who is the author of the Harry Potter books?",
    "What's the opposite of 'generous'?",
    "Summarize in one line: The meeting moved from Monday to Wednesday at 3pm.",
    "What is the largest ocean?",
    "When is Christmas?",
    "Write a one-line birthday wish for my sister.",
    "How many legs does a spider have?",
    "Which language is spoken in Brazil?",
    "What's the square root of 144?",
    "Give me a word that rhymes with 'light'.",
    "What does CPU stand for?",
    "What is the freezing point of water in Celsius?",
    "Rewrite in the past tense: 'She walks to school.'",
    "How do I pronounce 'quinoa'?",
    "What's a good title for a blog post about morning coffee?",
    "Who was the first person to walk on the moon?",
    "What is the speed of light, roughly?",
    "Name a famous bridge in San Francisco.",
    "Is it 'affect' or 'effect' in 'the weather will ___ our plans'?",
    "What colour do you get by mixing blue and yellow?",
    "How many minutes are in three hours?",
    "What's the abbreviation for kilogram?",
    "ok thanks",
    "What's the capital of Canada?",
    "Give me a quick fun fact about octopuses.",
    "What does RSVP mean?",
    "Which is bigger, a kilobyte or a megabyte?",
]

HARD = [
    "Prove that there are infinitely many prime numbers, and explain each step of the argument.",
    "Write a Python function that merges overlapping intervals in O(n log n), with tests and edge cases.",
    "Compare PostgreSQL and MongoDB for an event-sourcing system with strict ordering guarantees; discuss "
    "trade-offs in consistency, indexing and operational cost.",
    "Design a rate limiter for a distributed API gateway that handles 100k requests per second across "
    "regions. Explain the data structures, failure modes and how you would test it.",
    'Here is a stack trace from my Django app:\nTraceback (most recent call last):\n  File "views.py", '
    "line 42, in get\n    obj = Model.objects.get(pk=pk)\nDoesNotExist\nWhy does this happen intermittently "
    "under load and how do I fix it?",
    "Derive the closed form of the sum of the first n squares and prove it by induction.",
    "Explain why the central limit theorem holds, with the intuition behind characteristic functions.",
    "Refactor this JavaScript to use async/await and explain the error-handling differences:\n"
    "function load(url, cb) { fetch(url).then(r => r.json()).then(d => cb(null, d)).catch(cb); }",
    "Analyze the economic implications of a universal basic income on labour supply, inflation and public "
    "debt, citing the main empirical studies and their limitations.",
    "Write a detailed 1,500-word essay on the causes of the First World War, structured with an "
    "introduction, three thematic sections and a conclusion.",
    "What are the trade-offs between optimistic and pessimistic locking in a high-contention inventory "
    "system? Give a concrete scheme for each and when it breaks down.",
    "Implement a thread-safe LRU cache in C++ with O(1) get and put, and explain the memory ordering you rely on.",
    "Solve: find all real x such that x^4 - 5x^2 + 4 = 0, and show the factorisation.",
    "Why does my React component re-render infinitely when I call setState inside useEffect without a "
    "dependency array? Walk through the render cycle step by step.",
    "Plan a migration of a 2 TB MySQL database to PostgreSQL with under five minutes of downtime. List the "
    "phases, tooling, validation and rollback plan.",
    "Explain how transformers use attention, derive the scaled dot-product formula, and discuss why the "
    "scaling factor matters for gradient flow.",
    "Debug this SQL: SELECT user_id, COUNT(*) FROM orders o JOIN payments p ON o.id = p.order_id GROUP BY "
    "user_id HAVING COUNT(*) > 1; it double-counts orders with several payments. Rewrite it correctly.",
    "Write a business plan outline for a subscription meal-kit startup targeting university students, with "
    "unit economics, customer acquisition strategy and risks.",
    "Evaluate the argument that free will is incompatible with determinism, presenting compatibilist and "
    "libertarian responses and your assessment.",
    "Given a weighted directed graph with negative edges but no negative cycles, explain how Bellman-Ford "
    "works, prove its correctness, and compare it with Dijkstra with potentials.",
    "Write a bash script that rotates logs daily, compresses files older than 7 days, deletes those older "
    "than 30, and is safe to run concurrently. Explain each part.",
    "My Kubernetes pods get OOMKilled only in production although limits match staging. What could cause "
    "this, and how would I investigate systematically?",
    "Translate this legal clause into plain English and point out any ambiguity that could be exploited: "
    "'The Licensee shall indemnify the Licensor against all losses arising, save where such losses result "
    "from the Licensor's negligence, howsoever caused.'",
    "Explain the difference between eventual consistency and causal consistency with examples, and which "
    "one a collaborative text editor needs and why.",
    "Create a study plan for learning linear algebra in eight weeks for machine learning, with weekly "
    "topics, exercises and how to check understanding.",
    "Implement binary search on a rotated sorted array with duplicates and analyze the worst-case complexity.",
    "Critically review this abstract and suggest how to strengthen its methodology: 'We surveyed 40 users "
    "and found that our app improves productivity by 30%.'",
    "How would you architect a real-time multiplayer game server for 10,000 concurrent players? Discuss "
    "networking, state synchronisation, cheating and scaling.",
    "Write a short story of about 800 words about a lighthouse keeper who discovers a message in a bottle, "
    "with a twist ending.",
    "Explain step by step how public-key cryptography lets two strangers agree on a secret, including the "
    "maths of Diffie-Hellman and why it resists eavesdropping.",
    "Optimize this Python loop that processes 10 million rows and explain why each change helps:\n"
    "for i in range(len(rows)):\n    if rows[i]['x'] in seen_list:\n        out.append(rows[i])",
    "Compare three approaches to state management in a large Vue application and recommend one for a team "
    "of twelve, with reasons.",
    "What are the implications of Gödel's incompleteness theorems for mathematics and for artificial "
    "intelligence? Be precise about what they do and do not say.",
    "Write unit tests with pytest for a function that parses ISO 8601 durations, covering edge cases like "
    "fractional seconds and negative durations.",
    "Explain the causes of the 2008 financial crisis and evaluate which regulatory changes since then "
    "address them and which do not.",
    "Design a database schema for a hospital appointment system with doctors, rooms, recurring availability "
    "and cancellations; explain the constraints and indexes.",
    "Why is the halting problem undecidable? Give the diagonal argument in detail.",
    "Draft a detailed project proposal for migrating our monolith to microservices, including risks, "
    "milestones, team structure and success metrics.",
    "I have a memory leak in a Node.js service that grows 50 MB an hour. Describe a systematic method to "
    "find it, the tools to use, and the usual culprits.",
    "Calculate the expected number of rolls of a fair die to see all six faces, and explain the derivation.",
    "Write a Rust function that parses a CSV line with quoted fields and escaped quotes, and explain the "
    "ownership decisions.",
    "Assess the strengths and weaknesses of three approaches to carbon pricing and which is most politically durable.",
    "Explain how garbage collection works in the JVM, compare G1 and ZGC, and when to choose each.",
    "Write a cover letter for a senior data engineer position, tailored to a fintech company, highlighting "
    "streaming pipelines and data governance, about 400 words.",
    "Given these requirements, propose an algorithm for scheduling exams so no student has two at once, "
    "and discuss its complexity and heuristics.",
    "Explain the proof that the square root of 2 is irrational and generalise it to any non-square integer.",
    "What are the security risks of storing JWTs in localStorage versus cookies, and what should a modern "
    "single-page app do? Discuss CSRF and XSS.",
    "Write a SQL query for a running 7-day average of revenue per product, handling days with no sales, "
    "and explain the window functions.",
    "Outline a research methodology to measure whether remote work affects innovation, including data "
    "sources, confounders and identification strategy.",
    "Explain how Raft achieves consensus, what happens during a network partition, and how it differs from "
    "Paxos in practice.",
    "Write an async Python web scraper that respects robots.txt, rate limits per domain and retries with "
    "backoff. Explain the design.",
    "Analyze the themes of identity and memory in Kazuo Ishiguro's Never Let Me Go with references to key scenes.",
    "How do I prove that a language is not regular using the pumping lemma? Work through the example {a^n b^n}.",
    "Design an A/B testing framework for a mobile app, covering randomisation, sample size, peeking and "
    "multiple comparisons.",
    "Convert this recursive Fibonacci into an iterative and a matrix-exponentiation version, and compare "
    "their complexity.",
    "Explain the differences between TCP congestion control algorithms Reno, CUBIC and BBR, and when BBR "
    "performs worse.",
    "Help me negotiate a salary offer: I have two offers with different equity and bonus structures. How "
    "should I compare them and what should I say?",
    "Write a Dockerfile and a compose file for a Django app with Celery, Redis and PostgreSQL, production "
    "ready, and explain the security choices.",
    "Explain why quicksort is O(n log n) on average but O(n^2) in the worst case, and how introsort avoids it.",
]
