"""Sphinx extension: titles of the book's sphinx-exercise boxes.

nb2myst writes `exercise-start` directives titled "Exercise 3.2 — Split the heads (★★☆)" (or "Question ...")
with `:nonumber:`. sphinx-exercise would show them as "Exercise (Exercise 3.2 — ...)"; here the box shows the
title as written. Solutions of questions (labels `ans-N-M`, see nb2myst) are titled "Answer" instead of "Solution".
"""
from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx_exercise.nodes import exercise_node, exercise_subtitle, exercise_title, solution_node


class ExerciseTitleAsWritten(SphinxPostTransform):
    "Give each unnumbered exercise box its subtitle as the whole title."
    default_priority = 19  # before sphinx-exercise's ResolveTitlesInExercises (20), which then leaves it alone

    def run(self, **kwargs) -> None:
        for node in self.document.findall(exercise_node):
            title = node.children[0]
            if isinstance(title, exercise_title) and len(title.children) > 1 \
                    and isinstance(title.children[1], exercise_subtitle):
                title.replace_self(nodes.title("", "", *(c.deepcopy() for c in title.children[1].children)))
                node.resolved_title = True


class AnswerTitle(SphinxPostTransform):
    "Title the solution of a written question (label `ans-N-M`) 'Answer'."
    default_priority = 22  # after sphinx-exercise's ResolveTitlesInSolutions (21)

    def run(self, **kwargs) -> None:
        for node in self.document.findall(solution_node):
            if node.get("label", "").startswith("ans-") and isinstance(node.children[0], nodes.title):
                node.children[0].replace_self(nodes.title("", "Answer"))
                node["title"] = "Answer"


def setup(app):
    app.setup_extension("sphinx_exercise")
    app.add_post_transform(ExerciseTitleAsWritten)
    app.add_post_transform(AnswerTitle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
