"""Every token a query: causal (next-token) attention, the synthetic language, the causal and soft-margin
Att-SVMs and the token-preference graph.

A ``SequenceProblem`` holds n sequences X_i of T tokens and one linear head v_ik per query position k. Query k of
sequence i is the token x_ik; it attends to the tokens t <= k of its prefix (causal) or to every token t (seq2seq):

    logit_ikt = x_it^T W x_ik,   s_ik = softmax over the candidates t,   f_ik = sum_t s_ikt gamma_ikt,
    gamma_ikt = v_ik^T x_it (the token score),   L(W) = mean over (i, k) of l(f_ik)      (labels +1).

Data (``_problems``): ``synthetic_language`` (a seeded first-order Markov language with explicit next-token
probabilities) and ``next_token_problems`` (sentences sampled from it, one problem per seed); ``next_token_problem``
makes any X a next-token problem, with the head of query k the embedding of the true next token,
v_ik = x_{i,k+1} (tied embeddings); ``random_problem`` is the papers' random instance with every token a query.
``candidates``, ``scores``, ``optimal_tokens`` and ``separation_mask`` give the tokens each query may attend to,
their scores, the best one and the constraints of a selection.

Model (``_model``): ``logits``, ``attention``, ``outputs``, ``loss``; ``weight_gradient`` and ``loss_gradient``,
the exact gradient (each query is paper A's model with its own head and label +1), and ``gd``, gradient descent
on the training loop of ``train.gd``.

The causal Att-SVM (``_svm``): ``att_svm``, hard or soft margin (the solvers of ``svm.soft_margin_svm``), with
``feasible``, ``penalty_threshold``, ``margins``, ``violations``, ``total_slack`` and ``combine``. On language data
the hard margin is often infeasible: one query token must prefer a to b in one prefix and b to a in another.
The preference graphs (``_preferences``, on networkx) find why: ``preference_cycle``, ``conflicts``,
``max_positive_margins``, ``selects_optimal``.

Conventions: indices start at 0 (query k = 0 is the first token); the optimal token is argmax_t gamma_ikt, ties
(exact copies of one token) broken towards the latest occurrence; ``margins`` and the multipliers are NaN/0 off
the separation constraints.
"""

from ..model import MAX_RECORDS, MAX_STEPS
from ..svm import OBJECTIVES, SOLVER_FLOATS
from ._model import attention, gd, logits, loss, loss_gradient, outputs, weight_gradient
from ._next_token import (GRAPH_NORMS, NTPProblem, finite_part, finite_subspace, graph_svm, ntp_attention, ntp_gd,
                          ntp_gradient, ntp_logits, ntp_loss, ntp_probabilities, ntp_problem, official_problems,
                          priority_components, priority_graphs, retrieved, MAX_DRAWS)
from ._preferences import (MAX_GRAPH_STEPS, MAX_ORDER_TOKENS, conflicts, max_positive_margins, preference_cycle,
                           selects_optimal)
from ._problems import (Language, SequenceProblem, candidates, next_token_problem, next_token_problems,
                        optimal_tokens, random_problem, scores, separation_mask, synthetic_language)
from ._svm import SLACKS, att_svm, combine, feasible, margins, penalty_threshold, total_slack, violations

__all__ = ["Language", "SequenceProblem", "att_svm", "attention", "candidates", "combine", "conflicts", "feasible",
           "gd", "logits", "loss", "loss_gradient", "margins", "max_positive_margins", "next_token_problem",
           "next_token_problems", "optimal_tokens", "outputs", "penalty_threshold", "preference_cycle",
           "random_problem", "scores", "selects_optimal", "separation_mask", "synthetic_language", "total_slack",
           "violations", "weight_gradient", "OBJECTIVES", "SLACKS", "SOLVER_FLOATS", "MAX_STEPS", "MAX_RECORDS",
           "MAX_GRAPH_STEPS", "MAX_ORDER_TOKENS"]
__all__ += ["NTPProblem", "finite_part", "finite_subspace", "graph_svm", "ntp_attention", "ntp_gd", "ntp_gradient",
            "ntp_logits", "ntp_loss", "ntp_probabilities", "ntp_problem", "priority_components", "priority_graphs",
            "retrieved", "GRAPH_NORMS", "official_problems", "MAX_DRAWS"]  # next-token prediction, one query
