using System.Net;
using System.Text;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Two services of one domain (A calls B) as real processes: optimistic logging inside the domain, the distributed
/// flush before a reply leaves it, recovery broadcasts and orphan recovery, checked from the end client's side.
/// </summary>
[Trait("Category", "Process")]
public sealed class DomainTests : IDisposable
{
    private const string PeerKey = "test-peer-key-of-this-deployment-0123456789";
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task MemberCrashesAfterReplyingUnforced_TheCallerNeverShowsTheOrphanReply_RollsBack_AndTheCreditRunsOnce()
    {
        var aPort = ServiceProcess.FreePort();
        var bPort = ServiceProcess.FreePort();
        var domain = $"A=http://127.0.0.1:{aPort},B=http://127.0.0.1:{bPort}";
        var bEnv = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("b"), ["PS_SERVICE_NAME"] = "B", ["PS_PEER_KEY"] = PeerKey, ["PS_DOMAIN"] = domain, ["PS_DIE_AFTER_CREDIT"] = "1",
        };
        var aEnv = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("a"), ["PS_SERVICE_NAME"] = "A", ["PS_PEER_KEY"] = PeerKey, ["PS_DOMAIN"] = domain,
            ["PS_CALLEE_URL"] = $"http://127.0.0.1:{bPort}", ["PS_CALLEE_NAME"] = "B",
        };
        var b = await ServiceProcess.StartAsync(bEnv, bPort);
        await using var a = await ServiceProcess.StartAsync(aEnv, aPort);
        try
        {
            var session = await a.StartSessionAsync();

            // B credits, answers A without forcing (inside the domain), and dies before anything made the credit durable.
            // A's reply needs B's part flushed: B is gone, so the client gets 503, never a reply a crash took back.
            var pay = a.SendAsync(HttpMethod.Post, "/pay", session, 1, new { account = "op-1", amount = 100 });
            Assert.True(await b.WaitForExitAsync(TimeSpan.FromSeconds(30)), "B did not die after its credit:\n" + b.Output);
            await b.DisposeAsync();
            bEnv.Remove("PS_DIE_AFTER_CREDIT");
            b = await ServiceProcess.StartAsync(bEnv, bPort);

            var (first, _, _) = await pay;
            Assert.Equal(HttpStatusCode.ServiceUnavailable, first);

            // B tells A what it recovered; A's session is an orphan and rolls back: it calls B again with the same id.
            (HttpStatusCode Status, System.Text.Json.JsonElement Body, HttpResponseMessage Response) retry = default;
            for (var attempt = 0; attempt < 100; attempt++)
            {
                retry = await a.SendAsync(HttpMethod.Post, "/pay", session, 1, new { account = "op-1", amount = 100 });
                if (retry.Status == HttpStatusCode.OK)
                {
                    break;
                }

                Assert.Equal(HttpStatusCode.ServiceUnavailable, retry.Status);
                await Task.Delay(200, TestContext.Current.CancellationToken);
            }

            Assert.True(retry.Status == HttpStatusCode.OK, "A never answered after B recovered:\nA:\n" + a.Output + "\nB:\n" + b.Output);
            Assert.Equal(90, retry.Body.GetProperty("balance").GetInt64());
            Assert.Equal(1, retry.Body.GetProperty("payments").GetInt64());
            var (_, count, _) = await b.SendAsync(HttpMethod.Get, "/bank/credits/op-1", null, null);
            Assert.Equal(1, count.GetProperty("count").GetInt32());
            Assert.Contains("was an orphan", a.Output, StringComparison.Ordinal);

            // And the next payment goes through without a hitch.
            var (next, nextBody, _) = await a.SendAsync(HttpMethod.Post, "/pay", session, 2, new { account = "op-2", amount = 100 });
            Assert.Equal(HttpStatusCode.OK, next);
            Assert.Equal(180, nextBody.GetProperty("balance").GetInt64());
        }
        finally
        {
            await b.DisposeAsync();
        }
    }

    [Fact]
    public async Task DvHeaderFromOutsideTheDomain_IsRefusedAndLogged()
    {
        var bPort = ServiceProcess.FreePort();
        await using var b = await ServiceProcess.StartAsync(new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("b"), ["PS_SERVICE_NAME"] = "B", ["PS_PEER_KEY"] = PeerKey, ["PS_DOMAIN"] = $"B=http://127.0.0.1:{bPort}",
        }, bPort);
        var session = await b.StartSessionAsync();
        using var forged = new HttpRequestMessage(HttpMethod.Post, "/bank/credit")
        {
            Content = new StringContent("""{"account":"x","amount":1}""", Encoding.UTF8, "application/json"),
        };
        forged.Headers.TryAddWithoutValidation("PS-Session", session);
        forged.Headers.TryAddWithoutValidation("PS-Seq", "1");
        forged.Headers.TryAddWithoutValidation("PS-DV", "B=9.999999");
        using var response = await b.Client.SendAsync(forged, TestContext.Current.CancellationToken);

        Assert.Equal(HttpStatusCode.Unauthorized, response.StatusCode);
        Assert.Contains("dv-not-trusted", await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken), StringComparison.Ordinal);
        await Task.Delay(200, TestContext.Current.CancellationToken);
        Assert.Contains("Refused a DV header", b.Output, StringComparison.Ordinal);
    }
}
