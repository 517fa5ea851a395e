-- pyqueue-sql revision 0002_installed (PostgreSQL): what `pyqueue-sql migrate` installed, for
-- `pyqueue-sql migrate --check` (drift). One row per object: kind ('routine', 'table', 'index',
-- 'constraint', 'trigger', 'view', 'grant'), its name, a digest of its definition; and one row
-- of kind 'package': name the package version that ran migrate, digest that of its SQL sources.
-- Written by migrate at the end of a run; read by migrate --check and `pyqueue-sql version`.
-- A new table, no lock on any other.
CREATE TABLE pyqueue_installed (
    kind        text        NOT NULL,
    name        text        NOT NULL,
    digest      text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);
