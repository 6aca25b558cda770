-- A PostgreSQL database as memfs 5cbb843 (schema 3, before schema.py) left it: its migrations 1-3
-- as they ran, its version, and the rows its service wrote for one store (rows without seq).
CREATE TABLE stores (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            metadata TEXT NOT NULL,
            created_at TEXT COLLATE "C" NOT NULL,
            updated_at TEXT NOT NULL,
            archived_at TEXT
        );
CREATE TABLE store_kv (
            store_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value BIGINT NOT NULL,
            PRIMARY KEY (store_id, key)
        );
CREATE TABLE memories (
            id TEXT COLLATE "C" PRIMARY KEY,
            store_id TEXT NOT NULL,
            path TEXT COLLATE "C" NOT NULL,
            content BYTEA,
            sha TEXT,
            size INTEGER,
            version_id TEXT NOT NULL,
            counter BIGINT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            deleted_at TEXT
        );
CREATE UNIQUE INDEX memories_live_path ON memories (store_id, path) WHERE deleted_at IS NULL;
CREATE INDEX memories_counter ON memories (store_id, counter);
CREATE TABLE versions (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            store_id TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            operation TEXT NOT NULL,
            path TEXT COLLATE "C",
            content BYTEA,
            sha TEXT,
            size INTEGER,
            counter BIGINT NOT NULL,
            created_at TEXT COLLATE "C" NOT NULL,
            actor_type TEXT,
            actor_id TEXT,
            redacted_at TEXT,
            redactor_type TEXT,
            redactor_id TEXT
        );
CREATE INDEX versions_store ON versions (store_id, seq);
CREATE INDEX versions_memory ON versions (store_id, memory_id, counter);
CREATE TABLE sessions (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            token_hash TEXT UNIQUE,
            title TEXT,
            metadata TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            archived_at TEXT
        );
CREATE TABLE session_resources (
            session_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            memory_store_id TEXT NOT NULL,
            access TEXT NOT NULL,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            instructions TEXT,
            mount_path TEXT NOT NULL,
            PRIMARY KEY (session_id, position)
        );
CREATE INDEX memories_live_size ON memories (store_id, size, deleted_at) WHERE deleted_at IS NULL;
CREATE INDEX session_resources_store ON session_resources (memory_store_id, session_id);
CREATE INDEX versions_time ON versions (store_id, created_at, (id COLLATE "C"));
CREATE UNLOGGED TABLE org_buckets (class TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL, took BOOLEAN NOT NULL);
CREATE TABLE memfs_schema (version INTEGER NOT NULL);
INSERT INTO memfs_schema (version) VALUES (3);
INSERT INTO stores (id, name, description, metadata, created_at, updated_at, archived_at) VALUES ('memstore_szxYpKNjap52f2rclDu7iI72', 'legacy notes', 'written by an old memfs', '{"team": "a"}', '2026-12-05T02:00:34.219115Z', '2026-12-05T02:00:34.219115Z', NULL);
INSERT INTO store_kv (store_id, key, value) VALUES ('memstore_szxYpKNjap52f2rclDu7iI72', 'counter', 3);
INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, updated_at, deleted_at) VALUES ('mem_SwtJtCTzZA0hJcsL11HxMbiE', 'memstore_szxYpKNjap52f2rclDu7iI72', '/b.md', '\x62657461'::bytea, 'f44e64e75f3948e9f73f8dfa94721c4ce8cbb4f265c4790c702b2d41cfbf2753', 4, 'memver_UWPOChEgN2xDoCHQ9vALWinS', 2, '2026-12-05T02:00:34.237809Z', '2026-12-05T02:00:34.237809Z', NULL);
INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, updated_at, deleted_at) VALUES ('mem_ptZOinSJprzIygIfK0TBYSRl', 'memstore_szxYpKNjap52f2rclDu7iI72', '/notes/a.md', '\x616c70686120320a'::bytea, '90d10a43447e239811d9a5961bb78e2833c56e6fe60d1ed9afeaf49b1d06a7e4', 8, 'memver_cFjkoBmU3x14Npq9ypJYMuxi', 3, '2026-12-05T02:00:34.230024Z', '2026-12-05T02:00:34.239791Z', NULL);
INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, actor_type, actor_id, redacted_at, redactor_type, redactor_id) VALUES ('memver_fwViO1fjByrBvRIIXmz7P7hB', 'memstore_szxYpKNjap52f2rclDu7iI72', 'mem_ptZOinSJprzIygIfK0TBYSRl', 'created', '/notes/a.md', '\x616c7068610a'::bytea, 'b6a98d9ce9a2d9149288fa3df42d377c3e42737afdcdaf714e33c0a100b51060', 6, 1, '2026-12-05T02:00:34.230024Z', 'api_actor', 'k', NULL, NULL, NULL);
INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, actor_type, actor_id, redacted_at, redactor_type, redactor_id) VALUES ('memver_UWPOChEgN2xDoCHQ9vALWinS', 'memstore_szxYpKNjap52f2rclDu7iI72', 'mem_SwtJtCTzZA0hJcsL11HxMbiE', 'created', '/b.md', '\x62657461'::bytea, 'f44e64e75f3948e9f73f8dfa94721c4ce8cbb4f265c4790c702b2d41cfbf2753', 4, 2, '2026-12-05T02:00:34.237809Z', 'api_actor', 'k', NULL, NULL, NULL);
INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, actor_type, actor_id, redacted_at, redactor_type, redactor_id) VALUES ('memver_cFjkoBmU3x14Npq9ypJYMuxi', 'memstore_szxYpKNjap52f2rclDu7iI72', 'mem_ptZOinSJprzIygIfK0TBYSRl', 'modified', '/notes/a.md', '\x616c70686120320a'::bytea, '90d10a43447e239811d9a5961bb78e2833c56e6fe60d1ed9afeaf49b1d06a7e4', 8, 3, '2026-12-05T02:00:34.239791Z', 'api_actor', 'k', NULL, NULL, NULL);
INSERT INTO sessions (id, token_hash, title, metadata, created_at, updated_at, archived_at) VALUES ('sesn_jme0fIo8l8ZJwnvRk3BvQdeD', 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh', 't', '{}', '2026-12-05T02:00:34.241083Z', '2026-12-05T02:00:34.241083Z', NULL);
INSERT INTO session_resources (session_id, position, memory_store_id, access, name, description, instructions, mount_path) VALUES ('sesn_jme0fIo8l8ZJwnvRk3BvQdeD', 0, 'memstore_szxYpKNjap52f2rclDu7iI72', 'read_write', 'legacy notes', 'written by an old memfs', NULL, '/mnt/memory/legacy-notes');
