-- pyqueue-sql revision 0002_installed (MySQL/MariaDB): what `pyqueue-sql migrate` installed, for
-- `pyqueue-sql migrate --check` (drift). One row per object: kind ('routine', 'table', 'index',
-- 'constraint', 'trigger', 'view'), its name, a digest of its definition; and one row of kind
-- 'package': name the package version that ran migrate, digest that of its SQL sources.
-- Written by migrate at the end of a run; read by migrate --check and `pyqueue-sql version`.
-- A new table, no lock on any other.
CREATE TABLE pyqueue_installed (
    kind        VARCHAR(16)  NOT NULL,
    name        VARCHAR(700) NOT NULL,
    digest      VARCHAR(64)  NOT NULL,
    recorded_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (kind, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
