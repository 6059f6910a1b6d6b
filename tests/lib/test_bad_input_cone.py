"""Bad input to theory.cone_constants, Cone.radius / start_radius and theory.cone_sides: a clear error naming
the argument."""

import numpy as np
import pytest

import attnsvm
from attnsvm import data, theory

COVERED = {"theory.cone_constants", "theory.cone_sides"}


@pytest.fixture(scope="module")
def setting():
    attnsvm.setup(seed=0)
    problem = data.random_problem(4, 5, 6, seed=0)
    opt = theory.optimal_tokens(problem)
    return problem, opt, theory.cone_constants(problem, opt)


def test_a_selection_that_is_not_locally_optimal_is_refused(setting):
    problem, opt, _ = setting
    swaps = theory.neighbour_selections(opt, 5)
    bad = swaps[int(np.flatnonzero(~theory.locally_optimal(problem.repeat(len(swaps)), swaps))[0])]
    with pytest.raises(ValueError, match="alpha is not locally optimal"):
        theory.cone_constants(problem, bad)
    with pytest.raises(ValueError, match="alpha is not locally optimal"):
        theory.cone_sides(problem, np.eye(6), bad)


def test_a_batch_and_a_bad_loss_are_refused(setting):
    problem, opt, _ = setting
    with pytest.raises(ValueError, match="problem must be one problem"):
        theory.cone_constants(problem.repeat(2), opt)
    with pytest.raises(ValueError, match="loss"):
        theory.cone_constants(problem, opt, loss="hinge")


@pytest.mark.parametrize("eps, zeta, name", [(0.0, 1e-9, "eps"), (1.5, 1e-9, "eps"), (float("nan"), 1e-9, "eps"),
                                             (0.5, 0.0, "zeta"), (0.5, 1.0, "zeta")])
def test_radius_refuses_parameters_out_of_range(setting, eps, zeta, name):
    with pytest.raises(ValueError, match=f"{name} must be in"):
        setting[2].radius(eps, zeta)


def test_start_radius_refuses_a_bad_step_or_cone(setting):
    cone = setting[2]
    with pytest.raises(ValueError, match="eta must be in"):
        cone.start_radius(cone.zeta_max, -0.1, normalized=True)
    with pytest.raises(ValueError, match="zeta must be in"):
        cone.start_radius(2 * cone.zeta_max, 0.1, normalized=True)
    with pytest.raises(TypeError, match="eta must be a real number"):
        cone.start_radius(cone.zeta_max, "0.1", normalized=False)


def test_cone_sides_refuses_zero_and_misshapen_W(setting):
    problem, opt, _ = setting
    with pytest.raises(ValueError, match="W must be non-zero"):
        theory.cone_sides(problem, np.zeros((6, 6)), opt)
    with pytest.raises(ValueError, match=r"W must have shape \(\.\.\., 6, 6\)"):
        theory.cone_sides(problem, np.eye(5), opt)
