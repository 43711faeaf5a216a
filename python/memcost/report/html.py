"""report.html: one self-contained page (images embedded, no network)."""

from __future__ import annotations

import base64
from pathlib import Path

from ..results import machine_label, write_atomically
from ..experiments import REGISTRY
from . import reading, title_of

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>memcost report — {{ host }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; line-height: 1.45; }
 h1 { margin-bottom: 0.2rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.5rem; }
 .meta { color: #666; }
 table { border-collapse: collapse; margin: 1rem 0; font-size: 0.85rem; }
 th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
 th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
 caption { text-align: left; font-weight: bold; padding: 0.3rem 0; }
 img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0; }
 .interpretation { background: #f6f9ff; border-left: 4px solid #4c72b0; padding: 0.6rem 1rem; }
 .warnings li { color: #8a4b00; }
</style>
</head>
<body>
<h1>memcost report — {{ host }}</h1>
<p class="meta">{{ run_name }} · memcost {{ version }}</p>
{% for section in sections %}
<section id="{{ section.name }}">
<h2>{{ section.title }}</h2>
{% if section.interpretation %}<div class="interpretation">{% for sentence in section.interpretation %}<p>{{ sentence }}</p>{% endfor %}</div>{% endif %}
{% for image in section.images %}<img src="data:image/png;base64,{{ image.data }}" alt="{{ image.name }}">{% endfor %}
{% for drawing in section.drawings %}<div class="drawing">{{ drawing | safe }}</div>{% endfor %}
{% for caption, headings, rows in section.tables %}
<table><caption>{{ caption }}</caption>
<tr>{% for heading in headings %}<th>{{ heading }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}
</table>
{% endfor %}
{% if section.notes %}<ul>{% for note in section.notes %}<li>{{ note }}</li>{% endfor %}</ul>{% endif %}
{% if section.warnings %}<h3>Warnings</h3><ul class="warnings">{% for warning in section.warnings %}<li>{{ warning }}</li>{% endfor %}</ul>{% endif %}
</section>
{% endfor %}
</body>
</html>
"""

def draw(document: dict, directory: Path) -> list[Path]:
    """Every figure of a results document, drawn from its summary by its experiment (matplotlib
    loads only then, inside the experiment's figures())."""
    experiment = REGISTRY.get(document["experiment"])
    if experiment is None:
        return []
    return experiment.figures(document["summary"], machine_label(document["context"]), directory)


def sections(documents: dict[str, dict], directory: Path) -> list[dict]:
    result = []
    for name, document in documents.items():
        experiment = reading(REGISTRY.get(name))
        # Results copied without their figures (another machine, a test) get them redrawn.
        if any(not (directory / figure).exists() for figure in document["summary"].get("figures", [])):
            draw(document, directory)
        images = []
        for figure in document["summary"].get("figures", []):
            path = directory / figure
            if figure.endswith(".png") and path.exists():
                images.append({"name": figure, "data": base64.b64encode(path.read_bytes()).decode("ascii")})
        result.append({
            "name": name, "title": title_of(name),
            "interpretation": experiment.interpret(document["summary"]) if experiment else [],
            "images": images,
            # Drawn here, from our own data and escaped text: safe to inline.
            "drawings": experiment.drawings(document) if experiment else [],
            "tables": experiment.tables(document["summary"]) if experiment else [],
            "notes": experiment.notes(document["summary"]) if experiment else document["summary"].get("notes", []),
            "warnings": [w["message"] for w in document.get("warnings", [])],
        })
    return result


def write(documents: dict[str, dict], directory: Path) -> Path:
    import jinja2  # loads only when a report is written
    first = next(iter(documents.values()))
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = environment.from_string(TEMPLATE).render(
        host=machine_label(first["context"]), run_name=Path(directory).resolve().name,
        version=first.get("tool_version", ""), sections=sections(documents, Path(directory)))
    path = Path(directory) / "report.html"
    write_atomically(path, page)
    return path
