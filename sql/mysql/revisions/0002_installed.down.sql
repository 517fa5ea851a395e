DROP TABLE IF EXISTS pyqueue_installed;
