struct Handlers;

impl Handlers {
    #[idem::idempotent(scope = account)]
    async fn create_order(&self, account: actix_web::web::ReqData<i64>) -> &'static str {
        let _ = account;
        "created"
    }
}

fn main() {}
