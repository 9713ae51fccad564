//! idem's consumer inbox against a real RabbitMQ broker: see `tests/rabbitmq.rs` and the
//! consumer it starts and kills, `src/bin/inbox-consumer.rs`. Built only with the
//! `rabbitmq` feature; the README's test command leaves it out.
