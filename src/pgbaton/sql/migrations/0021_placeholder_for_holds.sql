-- A placeholder for migration 21, which another branch (the claim's `holds` column)
-- takes: it keeps this branch's migrations numbered 1..n until the merge replaces it.
SELECT 1;
