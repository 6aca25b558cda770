-- A SQLite database as memfs 5cbb843 (schema 4, before schema.py) left it: its migrations 1-4
-- as they ran, its version, and the rows its service wrote for one store (rows without seq).
CREATE TABLE stores (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            metadata TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            archived_at TEXT
        );
CREATE TABLE store_kv (
            store_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value,
            PRIMARY KEY (store_id, key)
        ) WITHOUT ROWID;
CREATE TABLE memories (
            id TEXT PRIMARY KEY,
            store_id TEXT NOT NULL,
            path TEXT NOT NULL,
            content TEXT,
            sha TEXT,
            size INTEGER,
            version_id TEXT NOT NULL,
            counter INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            deleted_at TEXT
        );
CREATE UNIQUE INDEX memories_live_path ON memories (store_id, path) WHERE deleted_at IS NULL;
CREATE INDEX memories_counter ON memories (store_id, counter);
CREATE TABLE versions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            store_id TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            operation TEXT NOT NULL,
            path TEXT,
            content TEXT,
            sha TEXT,
            size INTEGER,
            counter INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            actor_type TEXT,
            actor_id TEXT,
            redacted_at TEXT,
            redactor_type TEXT,
            redactor_id TEXT
        );
CREATE INDEX versions_store ON versions (store_id, seq);
CREATE INDEX versions_memory ON versions (store_id, memory_id, counter);
CREATE TABLE sessions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE INDEX memories_live_listing ON memories (store_id, path, id, sha, size, version_id, created_at, updated_at, deleted_at) WHERE deleted_at IS NULL;
CREATE INDEX versions_time ON versions (store_id, created_at, id);
PRAGMA user_version = 4;
INSERT INTO stores (id, name, description, metadata, created_at, updated_at, archived_at) VALUES ('memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', 'legacy notes', 'written by an old memfs', '{"team": "a"}', '2026-12-05T02:00:28.889215Z', '2026-12-05T02:00:28.889215Z', NULL);
INSERT INTO store_kv (store_id, key, value) VALUES ('memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', 'counter', 3);
INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, updated_at, deleted_at) VALUES ('mem_FxNOewjtup102EywTHmiJKgn', 'memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', '/b.md', 'beta', 'f44e64e75f3948e9f73f8dfa94721c4ce8cbb4f265c4790c702b2d41cfbf2753', 4, 'memver_GBrc5ORPYl4Cfe4dXeyjQ5Nk', 2, '2026-12-05T02:00:28.914400Z', '2026-12-05T02:00:28.914400Z', NULL);
INSERT INTO memories (id, store_id, path, content, sha, size, version_id, counter, created_at, updated_at, deleted_at) VALUES ('mem_mMPkHAl8vOBa8WhFtH8zcNOU', 'memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', '/notes/a.md', 'alpha 2
', '90d10a43447e239811d9a5961bb78e2833c56e6fe60d1ed9afeaf49b1d06a7e4', 8, 'memver_J7Y09SEPPIyDnsSRuy8FK8Kx', 3, '2026-12-05T02:00:28.904070Z', '2026-12-05T02:00:28.922424Z', NULL);
INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, actor_type, actor_id, redacted_at, redactor_type, redactor_id) VALUES ('memver_1K3TaQy4j640MUuJ5VkBLz9j', 'memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', 'mem_mMPkHAl8vOBa8WhFtH8zcNOU', 'created', '/notes/a.md', 'alpha
', 'b6a98d9ce9a2d9149288fa3df42d377c3e42737afdcdaf714e33c0a100b51060', 6, 1, '2026-12-05T02:00:28.904070Z', 'api_actor', 'k', NULL, NULL, NULL);
INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, actor_type, actor_id, redacted_at, redactor_type, redactor_id) VALUES ('memver_GBrc5ORPYl4Cfe4dXeyjQ5Nk', 'memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', 'mem_FxNOewjtup102EywTHmiJKgn', 'created', '/b.md', 'beta', 'f44e64e75f3948e9f73f8dfa94721c4ce8cbb4f265c4790c702b2d41cfbf2753', 4, 2, '2026-12-05T02:00:28.914400Z', 'api_actor', 'k', NULL, NULL, NULL);
INSERT INTO versions (id, store_id, memory_id, operation, path, content, sha, size, counter, created_at, actor_type, actor_id, redacted_at, redactor_type, redactor_id) VALUES ('memver_J7Y09SEPPIyDnsSRuy8FK8Kx', 'memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', 'mem_mMPkHAl8vOBa8WhFtH8zcNOU', 'modified', '/notes/a.md', 'alpha 2
', '90d10a43447e239811d9a5961bb78e2833c56e6fe60d1ed9afeaf49b1d06a7e4', 8, 3, '2026-12-05T02:00:28.922424Z', 'api_actor', 'k', NULL, NULL, NULL);
INSERT INTO sessions (id, token_hash, title, metadata, created_at, updated_at, archived_at) VALUES ('sesn_c3ifJeW2iMTGjdBob0jElBoz', 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh', 't', '{}', '2026-12-05T02:00:28.923151Z', '2026-12-05T02:00:28.923151Z', NULL);
INSERT INTO session_resources (session_id, position, memory_store_id, access, name, description, instructions, mount_path) VALUES ('sesn_c3ifJeW2iMTGjdBob0jElBoz', 0, 'memstore_a9X1Ryg6x9T0HxNYQgyCrNdl', 'read_write', 'legacy notes', 'written by an old memfs', NULL, '/mnt/memory/legacy-notes');
