//! The database-level patterns on PostgreSQL, SQLite and MySQL (or MariaDB): the same scenarios
//! stamped out for each database by `scenarios!`, then what is particular to each. Every test
//! has a table of its own (in a PostgreSQL schema, an SQLite file or a MySQL database of its
//! own); 64 transactions race on one key through a pool of connections.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

/// An order as the tests' table holds it: id, amount, state.
type Order = (String, i64, String);

/// The transactions of each race.
const RACERS: usize = 64;

/// The scenarios every database runs, for a module that defines `Db`, `HOLD`, `PLACE` (the
/// statement that inserts an order's id and amount), `NOT_NULL` and `code` (the code of a NOT
/// NULL column left without a value, and the code of an error), and `Shop` (with `pool`,
/// `orders` and `async fn new() -> Option<Shop>`, `None` when its server is not set).
macro_rules! scenarios {
    () => {
        use std::{future::Future, sync::Arc};

        use idem_sql::patterns::{Error, Insert, Inserted, Transition, Transitioned, Upserted};
        use sqlx::Transaction;
        use tokio::sync::Barrier;

        use crate::{Order, RACERS};

        impl Shop {
            async fn rows(&self) -> Vec<Order> {
                sqlx::query_as("SELECT id, amount, state FROM orders ORDER BY id")
                    .fetch_all(&self.pool)
                    .await
                    .unwrap()
            }

            async fn place(&self, id: &str, amount: i64) {
                sqlx::query(PLACE)
                    .bind(id)
                    .bind(amount)
                    .execute(&self.pool)
                    .await
                    .unwrap();
            }

            fn order(&self, id: &str, amount: i64) -> Insert<Db> {
                Insert::new(&self.orders)
                    .key("id", id.to_owned())
                    .value("amount", amount)
            }

            fn pay(&self, id: &str) -> Transition<Db> {
                Transition::new(&self.orders)
                    .key("id", id.to_owned())
                    .state("state", "placed", "paid")
            }
        }

        /// Runs `attempt` in `RACERS` transactions started at once, each held open for `HOLD`
        /// after it so that the others queue up behind the first write, and returns what each
        /// got, once committed.
        async fn race<T, F, Fut>(shop: &Arc<Shop>, attempt: F) -> Vec<T>
        where
            T: Send + 'static,
            F: Fn(Arc<Shop>, usize, Transaction<'static, Db>) -> Fut + Clone + Send + 'static,
            Fut: Future<Output = (Transaction<'static, Db>, T)> + Send,
        {
            let barrier = Arc::new(Barrier::new(RACERS));
            let tasks: Vec<_> = (0..RACERS)
                .map(|n| {
                    let (shop, barrier, attempt) = (shop.clone(), barrier.clone(), attempt.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        let tx = shop.pool.begin().await.unwrap();
                        let (tx, outcome) = attempt(shop, n, tx).await;
                        tokio::time::sleep(HOLD).await;
                        tx.commit().await.unwrap();
                        outcome
                    })
                })
                .collect();
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.unwrap());
            }
            outcomes
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn of_64_racing_inserts_one_inserts_and_63_find_its_row() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let shop = Arc::new(shop);
            let outcomes = race(&shop, |shop, n, mut tx| async move {
                // Each racer would store its own amount: the row shows whose insert won.
                let outcome: Inserted<Order> =
                    shop.order("o-1", n as i64 + 1).once(&mut tx).await.unwrap();
                (tx, outcome)
            })
            .await;

            let stored = shop.rows().await;
            assert_eq!(stored.len(), 1);
            let row = stored[0].clone();
            let inserted = outcomes
                .iter()
                .filter(|o| **o == Inserted::Inserted(row.clone()));
            assert_eq!(inserted.count(), 1);
            let already = outcomes
                .iter()
                .filter(|o| **o == Inserted::AlreadyThere(row.clone()));
            assert_eq!(already.count(), RACERS - 1);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn of_64_racing_keep_first_upserts_one_is_first_and_63_get_its_row() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let shop = Arc::new(shop);
            let outcomes = race(&shop, |shop, n, mut tx| async move {
                let outcome: Upserted<Order> = shop
                    .order("o-1", n as i64 + 1)
                    .keep_first(&mut tx)
                    .await
                    .unwrap();
                (tx, outcome)
            })
            .await;

            let stored = shop.rows().await;
            assert_eq!(stored.len(), 1);
            let first = outcomes.iter().filter(|o| o.first).count();
            assert_eq!(first, 1);
            assert!(outcomes.iter().all(|o| o.row == stored[0]), "{outcomes:?}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn of_64_racing_transitions_one_applies_and_63_find_it_applied() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let shop = Arc::new(shop);
            shop.place("o-1", 250).await;
            let outcomes = race(&shop, |shop, _, mut tx| async move {
                let outcome: Transitioned<Order> = shop.pay("o-1").run(&mut tx).await.unwrap();
                (tx, outcome)
            })
            .await;

            let paid: Order = ("o-1".into(), 250, "paid".into());
            assert_eq!(shop.rows().await, std::slice::from_ref(&paid));
            let applied = outcomes
                .iter()
                .filter(|o| **o == Transitioned::Applied(paid.clone()));
            assert_eq!(applied.count(), 1);
            let already = outcomes
                .iter()
                .filter(|o| **o == Transitioned::AlreadyApplied(paid.clone()));
            assert_eq!(already.count(), RACERS - 1);
        }

        #[tokio::test]
        async fn a_transition_from_another_state_is_a_conflict_with_the_current_row() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            shop.place("o-1", 250).await;
            let mut tx = shop.pool.begin().await.unwrap();
            let cancel = Transition::<Db>::new(&shop.orders)
                .key("id", "o-1")
                .state("state", "placed", "cancelled")
                .set("amount", 0_i64);
            let cancelled: Transitioned<Order> = cancel.run(&mut tx).await.unwrap();
            assert_eq!(
                cancelled,
                Transitioned::Applied(("o-1".into(), 0, "cancelled".into()))
            );
            let paid: Transitioned<Order> = shop.pay("o-1").run(&mut tx).await.unwrap();
            assert_eq!(
                paid,
                Transitioned::Conflict {
                    current: ("o-1".into(), 0, "cancelled".into())
                }
            );
            let unknown: Transitioned<Order> = shop.pay("o-2").run(&mut tx).await.unwrap();
            assert_eq!(unknown, Transitioned::NotFound);
            tx.commit().await.unwrap();
            assert_eq!(shop.rows().await, [("o-1".into(), 0, "cancelled".into())]);
        }

        #[tokio::test]
        async fn keep_first_keeps_the_first_writers_values() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let mut tx = shop.pool.begin().await.unwrap();
            let created: Upserted<Order> =
                shop.order("o-1", 100).keep_first(&mut tx).await.unwrap();
            assert_eq!(
                created,
                Upserted {
                    first: true,
                    row: ("o-1".into(), 100, "placed".into())
                }
            );
            tx.commit().await.unwrap();
            let mut tx = shop.pool.begin().await.unwrap();
            let kept: Upserted<Order> = shop.order("o-1", 999).keep_first(&mut tx).await.unwrap();
            assert_eq!(
                kept,
                Upserted {
                    first: false,
                    row: ("o-1".into(), 100, "placed".into())
                }
            );
            tx.commit().await.unwrap();
            assert_eq!(shop.rows().await, [("o-1".into(), 100, "placed".into())]);
        }

        #[tokio::test]
        async fn a_rolled_back_insert_leaves_the_key_free() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let mut first = shop.pool.begin().await.unwrap();
            let created: Inserted<Order> = shop.order("o-1", 100).once(&mut first).await.unwrap();
            assert_eq!(
                created,
                Inserted::Inserted(("o-1".into(), 100, "placed".into()))
            );
            first.rollback().await.unwrap();
            let mut second = shop.pool.begin().await.unwrap();
            let again: Inserted<Order> = shop.order("o-1", 200).once(&mut second).await.unwrap();
            assert_eq!(
                again,
                Inserted::Inserted(("o-1".into(), 200, "placed".into()))
            );
            second.commit().await.unwrap();
            assert_eq!(shop.rows().await, [("o-1".into(), 200, "placed".into())]);
        }

        #[tokio::test]
        async fn an_error_other_than_a_taken_key_is_returned_not_swallowed() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            // `amount` is NOT NULL without a default: left out, on a free key, then a taken one.
            for taken in [false, true] {
                if taken {
                    shop.place("o-1", 100).await;
                }
                let mut tx = shop.pool.begin().await.unwrap();
                let error = Insert::<Db>::new(&shop.orders)
                    .key("id", "o-1")
                    .once::<Order>(&mut tx)
                    .await
                    .unwrap_err();
                let Error::Database(source) = &error else {
                    panic!("{error:?}");
                };
                assert_eq!(code(source).as_deref(), Some(NOT_NULL), "{source}");
                tx.rollback().await.unwrap();
            }
            assert_eq!(shop.rows().await, [("o-1".into(), 100, "placed".into())]);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn an_insert_waiting_for_a_rolled_back_one_inserts() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let shop = Arc::new(shop);
            let mut first = shop.pool.begin().await.unwrap();
            let created: Inserted<Order> = shop.order("o-1", 100).once(&mut first).await.unwrap();
            assert_eq!(
                created,
                Inserted::Inserted(("o-1".into(), 100, "placed".into()))
            );

            let waiter = tokio::spawn({
                let shop = shop.clone();
                async move {
                    let mut tx = shop.pool.begin().await.unwrap();
                    let outcome: Inserted<Order> =
                        shop.order("o-1", 200).once(&mut tx).await.unwrap();
                    tx.commit().await.unwrap();
                    outcome
                }
            });
            // The waiter's insert is blocked on the key until `first` ends.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            assert!(!waiter.is_finished());
            first.rollback().await.unwrap();
            assert_eq!(
                waiter.await.unwrap(),
                Inserted::Inserted(("o-1".into(), 200, "placed".into()))
            );
            assert_eq!(shop.rows().await, [("o-1".into(), 200, "placed".into())]);
        }

        #[tokio::test]
        async fn names_are_validated_and_values_are_bound() {
            let Some(shop) = Shop::new().await else {
                return;
            };
            let mut tx = shop.pool.begin().await.unwrap();
            let injected = Insert::<Db>::new(&shop.orders)
                .key("id", "o-1")
                .value(r#"amount") VALUES ('x', 1); --"#, 1_i64)
                .once::<Order>(&mut tx)
                .await
                .unwrap_err();
            assert!(matches!(injected, Error::Name(_)), "{injected:?}");
            assert_eq!(injected.to_string(), "invalid column name");
            let no_key = Insert::<Db>::new(&shop.orders)
                .value("amount", 1_i64)
                .once::<Order>(&mut tx)
                .await;
            assert!(matches!(no_key, Err(Error::NoKey)), "{no_key:?}");
            let no_state = Transition::<Db>::new(&shop.orders)
                .key("id", "o-1")
                .run::<Order>(&mut tx)
                .await;
            assert!(matches!(no_state, Err(Error::NoState)), "{no_state:?}");

            let id = "o-1'); DROP TABLE orders; --";
            let stored: Inserted<Order> = shop.order(id, 5).once(&mut tx).await.unwrap();
            assert_eq!(stored, Inserted::Inserted((id.into(), 5, "placed".into())));
            tx.commit().await.unwrap();
            assert_eq!(shop.rows().await, [(id.into(), 5, "placed".into())]);
        }
    };
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::{str::FromStr, time::Duration};

    use idem_sql::patterns::Table;
    use idem_test_support::{PgSchema, Server};
    use sqlx::{
        PgPool,
        postgres::{PgConnectOptions, PgPoolOptions},
    };

    type Db = sqlx::Postgres;

    /// How long each racer holds its transaction open after its call.
    const HOLD: Duration = Duration::from_millis(5);

    const PLACE: &str = "INSERT INTO orders (id, amount) VALUES ($1, $2)";

    /// not_null_violation.
    const NOT_NULL: &str = "23502";

    fn code(error: &sqlx::Error) -> Option<String> {
        Some(error.as_database_error()?.code()?.into_owned())
    }

    /// A schema of the test's own with one `orders` table, reached through `search_path`.
    struct Shop {
        pool: PgPool,
        orders: Table,
        _schema: PgSchema,
    }

    impl Shop {
        /// `None`, having said so, when no PostgreSQL server is configured.
        async fn new() -> Option<Self> {
            let url = Server::Postgres.url()?;
            let schema = PgSchema::create(&url).await;
            let connect = PgConnectOptions::from_str(&url)
                .unwrap()
                .options([("search_path", schema.name())]);
            let pool = PgPoolOptions::new()
                .max_connections(16)
                .test_before_acquire(false)
                .connect_with(connect)
                .await
                .unwrap();
            sqlx::query(
                "CREATE TABLE orders (id text PRIMARY KEY, amount bigint NOT NULL, \
                 state text NOT NULL DEFAULT 'placed')",
            )
            .execute(&pool)
            .await
            .unwrap();
            let orders = format!("{}.orders", schema.name()).parse().unwrap();
            Some(Self {
                pool,
                orders,
                _schema: schema,
            })
        }
    }

    scenarios!();

    #[tokio::test]
    async fn keep_first_locks_the_row_until_the_transaction_ends() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        shop.place("o-1", 100).await;
        let mut holder = shop.pool.begin().await.unwrap();
        let kept: Upserted<Order> = shop
            .order("o-1", 999)
            .keep_first(&mut holder)
            .await
            .unwrap();
        assert_eq!(
            kept,
            Upserted {
                first: false,
                row: ("o-1".into(), 100, "placed".into())
            }
        );
        // Another transaction cannot change the row while `holder` holds it.
        let mut other = shop.pool.begin().await.unwrap();
        sqlx::query("SET LOCAL lock_timeout = '100ms'")
            .execute(&mut *other)
            .await
            .unwrap();
        let blocked = sqlx::query("UPDATE orders SET amount = 1 WHERE id = 'o-1'")
            .execute(&mut *other)
            .await
            .unwrap_err();
        let code = blocked.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("55P03")); // lock_not_available
        other.rollback().await.unwrap();
        holder.commit().await.unwrap();
        assert_eq!(shop.rows().await, [("o-1".into(), 100, "placed".into())]);
    }

    #[tokio::test]
    async fn under_repeatable_read_a_row_committed_after_the_snapshot_asks_for_a_retry() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        let mut late = shop.pool.begin().await.unwrap();
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *late)
            .await
            .unwrap();
        // The snapshot is taken by the first statement.
        let none: Vec<Order> = sqlx::query_as("SELECT id, amount, state FROM orders")
            .fetch_all(&mut *late)
            .await
            .unwrap();
        assert_eq!(none, []);
        shop.place("o-1", 100).await;
        let error = shop
            .order("o-1", 200)
            .once::<Order>(&mut late)
            .await
            .unwrap_err();
        assert!(error.is_retry(), "{error:?}");
        let Error::Retry(source) = error else {
            unreachable!()
        };
        let code = source.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("40001"));
    }
}

mod sqlite {
    use std::time::Duration;

    use idem_sql::patterns::Table;
    use sqlx::{
        SqlitePool,
        sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
    };

    type Db = sqlx::Sqlite;

    /// How long each racer holds its transaction open after its call.
    const HOLD: Duration = Duration::from_millis(2);

    const PLACE: &str = "INSERT INTO orders (id, amount) VALUES ($1, $2)";

    /// SQLITE_CONSTRAINT_NOTNULL.
    const NOT_NULL: &str = "1299";

    fn code(error: &sqlx::Error) -> Option<String> {
        Some(error.as_database_error()?.code()?.into_owned())
    }

    /// A database file of the test's own with one `orders` table.
    struct Shop {
        pool: SqlitePool,
        orders: Table,
        _dir: tempfile::TempDir,
    }

    impl Shop {
        /// Always a shop: SQLite needs no server.
        async fn new() -> Option<Self> {
            let dir = tempfile::tempdir().unwrap();
            let connect = SqliteConnectOptions::new()
                .filename(dir.path().join("shop.db"))
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(30));
            let pool = SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(connect)
                .await
                .unwrap();
            sqlx::query(
                "CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL, \
                 state TEXT NOT NULL DEFAULT 'placed')",
            )
            .execute(&pool)
            .await
            .unwrap();
            Some(Self {
                pool,
                orders: "orders".parse().unwrap(),
                _dir: dir,
            })
        }
    }

    scenarios!();

    #[tokio::test]
    async fn a_transaction_that_read_before_another_commit_is_asked_to_retry() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        let mut late = shop.pool.begin().await.unwrap();
        let none: Vec<Order> = sqlx::query_as("SELECT id, amount, state FROM orders")
            .fetch_all(&mut *late)
            .await
            .unwrap();
        assert_eq!(none, []);
        shop.place("o-1", 100).await;
        let error = shop
            .order("o-1", 200)
            .once::<Order>(&mut late)
            .await
            .unwrap_err();
        assert!(error.is_retry(), "{error:?}");
        late.rollback().await.unwrap();
        // Run again, it sees the row.
        let mut retry = shop.pool.begin().await.unwrap();
        let found: Inserted<Order> = shop.order("o-1", 200).once(&mut retry).await.unwrap();
        assert_eq!(
            found,
            Inserted::AlreadyThere(("o-1".into(), 100, "placed".into()))
        );
        retry.commit().await.unwrap();
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use std::time::Duration;

    use idem_sql::patterns::Table;
    use idem_test_support::{MysqlDatabase, Server};
    use sqlx::{
        AssertSqlSafe, MySqlPool,
        mysql::{MySqlDatabaseError, MySqlPoolOptions},
    };

    type Db = sqlx::MySql;

    /// How long each racer holds its transaction open after its call.
    const HOLD: Duration = Duration::from_millis(5);

    const PLACE: &str = "INSERT INTO orders (id, amount) VALUES (?, ?)";

    /// ER_NO_DEFAULT_FOR_FIELD, in strict mode (the default of MySQL 5.7 and MariaDB 10.2 on).
    const NOT_NULL: &str = "1364";

    /// The MySQL error number.
    fn code(error: &sqlx::Error) -> Option<String> {
        let error = error.as_database_error()?;
        Some(
            error
                .try_downcast_ref::<MySqlDatabaseError>()?
                .number()
                .to_string(),
        )
    }

    /// A database of the test's own with one `orders` table.
    struct Shop {
        pool: MySqlPool,
        orders: Table,
        database: MysqlDatabase,
    }

    impl Shop {
        /// `None`, having said so, when no MySQL server is configured.
        async fn new() -> Option<Self> {
            let url = Server::Mysql.url()?;
            let database = MysqlDatabase::create(&url).await;
            let pool = MySqlPoolOptions::new()
                .max_connections(16)
                .test_before_acquire(false)
                .connect(&database.url())
                .await
                .unwrap();
            sqlx::query(
                "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL, \
                 state VARCHAR(16) NOT NULL DEFAULT 'placed')",
            )
            .execute(&pool)
            .await
            .unwrap();
            let orders = format!("{}.orders", database.name()).parse().unwrap();
            Some(Self {
                pool,
                orders,
                database,
            })
        }
    }

    scenarios!();

    #[tokio::test]
    async fn keep_first_locks_the_row_until_the_transaction_ends() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        shop.place("o-1", 100).await;
        let mut holder = shop.pool.begin().await.unwrap();
        let kept: Upserted<Order> = shop
            .order("o-1", 999)
            .keep_first(&mut holder)
            .await
            .unwrap();
        assert_eq!(
            kept,
            Upserted {
                first: false,
                row: ("o-1".into(), 100, "placed".into())
            }
        );
        // Another transaction cannot change the row while `holder` holds it.
        let mut other = shop.pool.begin().await.unwrap();
        sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
            .execute(&mut *other)
            .await
            .unwrap();
        let blocked = sqlx::query("UPDATE orders SET amount = 1 WHERE id = 'o-1'")
            .execute(&mut *other)
            .await
            .unwrap_err();
        assert_eq!(code(&blocked).as_deref(), Some("1205")); // ER_LOCK_WAIT_TIMEOUT
        other.rollback().await.unwrap();
        holder.commit().await.unwrap();
        assert_eq!(shop.rows().await, [("o-1".into(), 100, "placed".into())]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn of_waiters_on_a_rolled_back_insert_one_inserts_and_the_others_find_it_or_retry() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        let shop = Arc::new(shop);
        let mut first = shop.pool.begin().await.unwrap();
        let created: Inserted<Order> = shop.order("o-1", 100).once(&mut first).await.unwrap();
        assert_eq!(
            created,
            Inserted::Inserted(("o-1".into(), 100, "placed".into()))
        );
        let waiters: Vec<_> = (0..8)
            .map(|n| {
                let shop = shop.clone();
                tokio::spawn(async move {
                    let mut tx = shop.pool.begin().await.unwrap();
                    let outcome = shop.order("o-1", 200 + n).once::<Order>(&mut tx).await;
                    if outcome.is_ok() {
                        tokio::time::sleep(HOLD).await;
                        tx.commit().await.unwrap();
                    }
                    outcome
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        first.rollback().await.unwrap();
        let mut outcomes = Vec::new();
        for waiter in waiters {
            outcomes.push(waiter.await.unwrap());
        }

        // InnoDB leaves the waiters' locks on the freed key as gap locks, and those that then
        // insert into the gap wait for each other: the deadlocks it detects roll them back.
        let stored = shop.rows().await;
        assert_eq!(stored.len(), 1);
        let row = stored[0].clone();
        let inserted = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(Inserted::Inserted(r)) if *r == row));
        assert_eq!(inserted.count(), 1, "{outcomes:?}");
        for outcome in &outcomes {
            match outcome {
                Ok(Inserted::Inserted(_)) => {}
                Ok(found) => assert_eq!(*found, Inserted::AlreadyThere(row.clone())),
                Err(Error::Retry(source)) => assert_eq!(code(source).as_deref(), Some("1213")),
                Err(error) => panic!("{error:?}"),
            }
        }
        // Run again, a transaction that was asked to retry finds the row.
        let mut retry = shop.pool.begin().await.unwrap();
        let found: Inserted<Order> = shop.order("o-1", 300).once(&mut retry).await.unwrap();
        assert_eq!(found, Inserted::AlreadyThere(row));
        retry.commit().await.unwrap();
    }

    #[tokio::test]
    async fn a_value_too_long_is_an_error_not_a_truncation_nor_a_taken_key() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        // `state` is VARCHAR(16): strict mode refuses 17 characters, on a free key, then a
        // taken one.
        for taken in [false, true] {
            if taken {
                shop.place("o-1", 100).await;
            }
            let mut tx = shop.pool.begin().await.unwrap();
            let error = shop
                .order("o-1", 200)
                .value("state", "x".repeat(17))
                .once::<Order>(&mut tx)
                .await
                .unwrap_err();
            let Error::Database(source) = &error else {
                panic!("{error:?}");
            };
            assert_eq!(code(source).as_deref(), Some("1406"), "{source}"); // ER_DATA_TOO_LONG
            tx.rollback().await.unwrap();
        }
        assert_eq!(shop.rows().await, [("o-1".into(), 100, "placed".into())]);
    }

    #[tokio::test]
    async fn a_row_committed_after_the_snapshot_is_found_under_both_isolation_levels() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        for isolation in ["REPEATABLE READ", "READ COMMITTED"] {
            sqlx::query("DELETE FROM orders")
                .execute(&shop.pool)
                .await
                .unwrap();
            let begin = |isolation: &'static str| {
                let pool = shop.pool.clone();
                async move {
                    let mut connection = pool.acquire().await.unwrap().detach();
                    let set = format!("SET TRANSACTION ISOLATION LEVEL {isolation}");
                    sqlx::query(AssertSqlSafe(set))
                        .execute(&mut connection)
                        .await
                        .unwrap();
                    sqlx::query("BEGIN").execute(&mut connection).await.unwrap();
                    connection
                }
            };
            let read = "SELECT id, amount, state FROM orders";
            // Each late transaction takes its snapshot, then another one commits.
            let mut late = begin(isolation).await;
            let none: Vec<Order> = sqlx::query_as(read).fetch_all(&mut late).await.unwrap();
            assert_eq!(none, []);
            shop.place("o-1", 100).await;
            let placed: Order = ("o-1".into(), 100, "placed".into());
            let seen: Vec<Order> = sqlx::query_as(read).fetch_all(&mut late).await.unwrap();
            let snapshot = if isolation == "REPEATABLE READ" {
                vec![]
            } else {
                vec![placed.clone()]
            };
            assert_eq!(seen, snapshot, "{isolation}");
            let found: Inserted<Order> = shop.order("o-1", 200).once(&mut late).await.unwrap();
            assert_eq!(found, Inserted::AlreadyThere(placed.clone()), "{isolation}");
            sqlx::query("COMMIT").execute(&mut late).await.unwrap();

            let mut late = begin(isolation).await;
            let seen: Vec<Order> = sqlx::query_as(read).fetch_all(&mut late).await.unwrap();
            assert_eq!(seen, [placed]);
            let mut other = shop.pool.begin().await.unwrap();
            let paid: Order = ("o-1".into(), 100, "paid".into());
            let applied: Transitioned<Order> = shop.pay("o-1").run(&mut other).await.unwrap();
            assert_eq!(applied, Transitioned::Applied(paid.clone()), "{isolation}");
            other.commit().await.unwrap();
            let again: Transitioned<Order> = shop.pay("o-1").run(&mut late).await.unwrap();
            assert_eq!(again, Transitioned::AlreadyApplied(paid), "{isolation}");
            sqlx::query("COMMIT").execute(&mut late).await.unwrap();
        }
    }

    #[tokio::test]
    async fn with_an_auto_increment_column_an_insert_is_told_from_a_row_met() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        sqlx::query(
            "CREATE TABLE payments (n BIGINT AUTO_INCREMENT PRIMARY KEY, \
             reference VARCHAR(64) NOT NULL UNIQUE, amount BIGINT NOT NULL)",
        )
        .execute(&shop.pool)
        .await
        .unwrap();
        let payments: Table = format!("{}.payments", shop.database.name())
            .parse()
            .unwrap();
        type Payment = (i64, String, i64);
        let payment = |reference: &str, amount: i64| {
            Insert::<Db>::new(&payments)
                .key("reference", reference.to_owned())
                .value("amount", amount)
        };

        let mut tx = shop.pool.begin().await.unwrap();
        // The statement reports the id it generated, 1.
        let generated: Inserted<Payment> = payment("p-1", 5).once(&mut tx).await.unwrap();
        assert_eq!(generated, Inserted::Inserted((1, "p-1".into(), 5)));
        let met: Inserted<Payment> = payment("p-1", 6).once(&mut tx).await.unwrap();
        assert_eq!(met, Inserted::AlreadyThere((1, "p-1".into(), 5)));
        // An id given generates none.
        let given = payment("p-2", 7).value("n", 100_i64);
        let inserted: Inserted<Payment> = given.once(&mut tx).await.unwrap();
        assert_eq!(inserted, Inserted::Inserted((100, "p-2".into(), 7)));
        let met: Inserted<Payment> = given.once(&mut tx).await.unwrap();
        assert_eq!(met, Inserted::AlreadyThere((100, "p-2".into(), 7)));
        tx.commit().await.unwrap();

        let stored: Vec<Payment> = sqlx::query_as("SELECT * FROM payments ORDER BY n")
            .fetch_all(&shop.pool)
            .await
            .unwrap();
        assert_eq!(stored, [(1, "p-1".into(), 5), (100, "p-2".into(), 7)]);
    }

    #[tokio::test]
    async fn an_insert_that_meets_a_row_on_another_unique_key_finds_no_row() {
        let Some(shop) = Shop::new().await else {
            return;
        };
        sqlx::query(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, email VARCHAR(64) NOT NULL UNIQUE)",
        )
        .execute(&shop.pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO accounts (id, email) VALUES (1, 'a@example.com')")
            .execute(&shop.pool)
            .await
            .unwrap();
        let accounts: Table = format!("{}.accounts", shop.database.name())
            .parse()
            .unwrap();

        let mut tx = shop.pool.begin().await.unwrap();
        let error = Insert::<Db>::new(&accounts)
            .key("id", 2_i64)
            .value("email", "a@example.com")
            .once::<(i64, String)>(&mut tx)
            .await
            .unwrap_err();
        assert!(matches!(error, Error::NoRow), "{error:?}");
        tx.commit().await.unwrap();
        let stored: Vec<(i64, String)> = sqlx::query_as("SELECT * FROM accounts")
            .fetch_all(&shop.pool)
            .await
            .unwrap();
        assert_eq!(stored, [(1, "a@example.com".into())]);
    }
}
