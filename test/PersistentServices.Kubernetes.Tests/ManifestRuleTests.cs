namespace PersistentServices.Kubernetes.Tests;

/// <summary>
/// The checker fails a deployment that breaks a rule: each case under TestData/ is a kustomization over the bookstore's
/// local overlay with one mistake, rendered by <c>kubectl kustomize</c> as a user's overlay would be.
/// </summary>
public sealed class ManifestRuleTests
{
    [Fact]
    public async Task UnknownField_IsRefusedWhenRead()
    {
        var yaml = await RenderAsync("unknown-field");

        var error = Assert.Throws<ManifestException>(() => StrictManifestReader.Read(yaml));

        Assert.Contains("PodDisruptionBudget store-typo", error.Message, StringComparison.Ordinal);
        Assert.Contains("'maxUnavailible' could not be mapped", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("missing-probe-path", "StatefulSet bookstore/store", "probes", "the liveness probe's path '/healthz' is not what the app maps for it (/health/live)")]
    [InlineData("short-grace", "StatefulSet bookstore/bookseller", "grace-period", "terminationGracePeriodSeconds 45 is not longer than the drain (40 s, DOTNET_SHUTDOWNTIMEOUTSECONDS) and the preStop sleep (5 s) together")]
    [InlineData("small-claim", "StatefulSet bookstore/store", "log-volume", "the log may take 120 MiB")]
    [InlineData("shared-probe", "StatefulSet bookstore/pricegrabber", "probes", "readiness and liveness share the path /health/ready")]
    [InlineData("privilege-escalation", "Deployment bookstore/taxcalculator", "restricted", "allowPrivilegeEscalation is not false")]
    [InlineData("peer-key-literal", "StatefulSet bookstore/store", "peer-key", "the peer key is a literal value, not a secretKeyRef")]
    [InlineData("single-gateway", "Deployment bookstore/gateway", "gateway", "the gateway must run as a Deployment of two or more copies (it has 1)")]
    [InlineData("accepted-peer-key-literal", "StatefulSet bookstore/bookseller", "peer-key", "the accepted peer key PersistentServices__Calls__AcceptedPeerKeys__0 is a literal value, not a secretKeyRef")]
    public async Task ABrokenRule_FailsTheCheck_NamingTheObjectAndTheRule(string testCase, string objectId, string rule, string message)
    {
        var objects = StrictManifestReader.Read(await RenderAsync(testCase));

        var violations = Bookstore.Checker.Check(objects);

        Assert.NotEmpty(violations);
        Assert.All(violations, v => Assert.Equal((objectId, rule), (v.Object, v.Rule)));
        Assert.Contains(violations, v => v.Message.Contains(message, StringComparison.Ordinal));
    }

    private static Task<string> RenderAsync(string testCase)
        => Kustomize.BuildAsync(Kustomize.InRepository($"test/PersistentServices.Kubernetes.Tests/TestData/{testCase}"));
}
