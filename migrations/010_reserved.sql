-- Reserved: number 010 belongs to another change on its way to main. This
-- placeholder only keeps the numbers without a gap (tern refuses one) on the
-- branch that adds 011_incidents.sql; drop it when that change's 010 lands.
SELECT 1;

---- create above / drop below ----

SELECT 1;
