package churn.generate;

/** One customer's attributes and latent state: what Model.customer computes from (seed, n). */
final class Customer {
    long n;
    String customerId;
    String gender, region, partner, dependents, contractType, paymentMethod, paperlessBilling, phoneService,
        multipleLines, internetService, onlineSecurity, onlineBackup, deviceProtection, techSupport,
        streamingTv, streamingMovies, street, streetType, payChannel;
    long houseNumber;
    int signupDay, ageAtSignup, billDay, tenureDays, birthDay, tenureMonths, supportCalls90d;
    long monthlyCents, updatedSecs, ageAtCutoff;
    double gbMean, logitX;
    int nCharges, nPayments, nLate, nSupport, nUsage, nPlan, nPreCutoff;
    int kind;
    boolean rejected;
    double churnProbability;
    boolean churned;
    int nEvents;
}
