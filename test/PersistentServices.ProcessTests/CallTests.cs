using System.Net;
using System.Text;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Calls between two real service processes (A calls B): each call runs once at B through retries, kills of A and of B,
/// and replay; functional and read-only calls cost no id; a call not signed with the deployment's key is refused.
/// </summary>
[Trait("Category", "Process")]
public sealed class CallTests : IDisposable
{
    private const string PeerKey = "test-peer-key-of-this-deployment-0123456789";
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    /// <summary>A caller A paying through a callee B (outside any domain): their ports and environments.</summary>
    private (int APort, Dictionary<string, string> AEnv, int BPort, Dictionary<string, string> BEnv) CallerAndCallee()
    {
        var bPort = ServiceProcess.FreePort();
        var aPort = ServiceProcess.FreePort();
        var bEnv = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("b"), ["PS_SERVICE_NAME"] = "B", ["PS_PEER_KEY"] = PeerKey };
        var aEnv = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("a"), ["PS_SERVICE_NAME"] = "A", ["PS_PEER_KEY"] = PeerKey, ["PS_CALLEE_URL"] = $"http://127.0.0.1:{bPort}",
        };
        return (aPort, aEnv, bPort, bEnv);
    }

    [Fact]
    public async Task Payments_AcrossKillsOfCallerAndCallee_EachCreditRunsOnceAtTheCallee_AndEveryReplyIsConsistent()
    {
        var (aPort, aEnv, bPort, bEnv) = CallerAndCallee();
        var b = await ServiceProcess.StartAsync(bEnv, bPort);
        var a = await ServiceProcess.StartAsync(aEnv, aPort);
        try
        {
            var session = await a.StartSessionAsync();
            var random = new Random(20261123);
            var acknowledged = new List<(string Op, long Balance)>();
            var seq = 1L;
            for (var op = 0; op < 24; op++)
            {
                var name = $"op-{op}";
                while (true)
                {
                    // Now and then one of the two dies (SIGKILL) while the payment is in flight, and comes back on its port.
                    Task? crash = null;
                    if (op % 4 == 3)
                    {
                        var victimIsA = random.Next(2) == 0;
                        crash = Task.Run(async () =>
                        {
                            await Task.Delay(random.Next(0, 40), TestContext.Current.CancellationToken);
                            if (victimIsA)
                            {
                                await a.KillAsync();
                                await a.DisposeAsync();
                                a = await ServiceProcess.StartAsync(aEnv, aPort);
                            }
                            else
                            {
                                await b.KillAsync();
                                await b.DisposeAsync();
                                b = await ServiceProcess.StartAsync(bEnv, bPort);
                            }
                        }, TestContext.Current.CancellationToken);
                    }

                    (HttpStatusCode Status, System.Text.Json.JsonElement Body, HttpResponseMessage Response) reply;
                    try
                    {
                        reply = await a.SendAsync(HttpMethod.Post, "/pay", session, seq, new { account = name, amount = 100 });
                    }
                    catch (HttpRequestException)
                    {
                        if (crash is not null)
                        {
                            await crash;
                        }

                        continue; // A was down: retry the same request with the same number
                    }

                    if (crash is not null)
                    {
                        await crash;
                    }

                    if (reply.Status != HttpStatusCode.OK)
                    {
                        Assert.True(reply.Status == HttpStatusCode.ServiceUnavailable, $"op {op} seq {seq}: {(int)reply.Status} {reply.Body}{Environment.NewLine}A: {a.RecentOutput()}{Environment.NewLine}B: {b.RecentOutput()}");
                        await Task.Delay(100, TestContext.Current.CancellationToken);
                        continue;
                    }

                    Assert.Equal(10, reply.Body.GetProperty("fee").GetInt64());
                    Assert.Equal(op + 1, reply.Body.GetProperty("payments").GetInt64());
                    acknowledged.Add((name, reply.Body.GetProperty("balance").GetInt64()));
                    seq++;
                    break;
                }
            }

            // At B: every credit exactly once; the balance is the sum; A's replies saw balances of one serial order.
            foreach (var (op, _) in acknowledged)
            {
                var (_, count, _) = await b.SendAsync(HttpMethod.Get, $"/bank/credits/{op}", null, null);
                Assert.Equal(1, count.GetProperty("count").GetInt32());
            }

            var (_, balance, _) = await b.SendAsync(HttpMethod.Get, "/bank/balance", null, null);
            Assert.Equal(24 * 90, balance.GetProperty("balance").GetInt64());
            Assert.Equal(Enumerable.Range(1, 24).Select(i => i * 90L), acknowledged.Select(x => x.Balance));
        }
        finally
        {
            await a.DisposeAsync();
            await b.DisposeAsync();
        }
    }

    /// <summary>
    /// A rolling deploy of the caller (SIGTERM) while one of its requests waits for a callee that is down for a moment:
    /// the drain lets the running request finish, its call retried until the callee answers, and its reply goes out.
    /// Until 2026-11-26 the call gave up the moment the host began stopping: the client got 503 and the request was
    /// finished only after the restart, although the host had its whole shutdown timeout left.
    /// </summary>
    [Fact]
    public async Task CallerStopsGracefully_WhileItsRequestWaitsForTheCallee_TheRequestFinishesInTheDrain()
    {
        var (aPort, aEnv, bPort, bEnv) = CallerAndCallee();
        var b = await ServiceProcess.StartAsync(bEnv, bPort);
        var a = await ServiceProcess.StartAsync(aEnv, aPort);
        try
        {
            var session = await a.StartSessionAsync();
            var (first, _, _) = await a.SendAsync(HttpMethod.Post, "/pay", session, 1, new { account = "op-1", amount = 100 });
            Assert.Equal(HttpStatusCode.OK, first);

            // B goes away; A's next payment waits in its call to B; then A is told to stop, and B comes back.
            await b.KillAsync();
            await b.DisposeAsync();
            var pay = a.SendAsync(HttpMethod.Post, "/pay", session, 2, new { account = "op-2", amount = 100 });
            await Task.Delay(500, TestContext.Current.CancellationToken);
            Assert.False(pay.IsCompleted, "the payment did not wait for B");
            var stopped = a.TerminateAsync(TimeSpan.FromSeconds(40));
            await Task.Delay(1000, TestContext.Current.CancellationToken);
            b = await ServiceProcess.StartAsync(bEnv, bPort);

            var (status, body, _) = await pay;
            Assert.True(status == HttpStatusCode.OK, $"the payment got {(int)status} while A drained:\nA:\n{a.RecentOutput()}");
            Assert.Equal(180, body.GetProperty("balance").GetInt64());
            Assert.Equal(0, await stopped);
            Assert.Contains("Drained: every request finished", a.Output, StringComparison.Ordinal);

            // After the restart the same number gets the same reply; the credit ran once at B.
            await a.DisposeAsync();
            a = await ServiceProcess.StartAsync(aEnv, aPort);
            var (again, againBody, againResponse) = await a.SendAsync(HttpMethod.Post, "/pay", session, 2, new { account = "op-2", amount = 100 });
            Assert.Equal(HttpStatusCode.OK, again);
            Assert.Equal(180, againBody.GetProperty("balance").GetInt64());
            Assert.True(againResponse.Headers.Contains("PS-Replayed"));
            var (_, count, _) = await b.SendAsync(HttpMethod.Get, "/bank/credits/op-2", null, null);
            Assert.Equal(1, count.GetProperty("count").GetInt32());
        }
        finally
        {
            await a.DisposeAsync();
            await b.DisposeAsync();
        }
    }

    [Fact]
    public async Task ForgedCall_WithoutTheDeploymentsSignature_IsRefusedAndLogged()
    {
        await using var b = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("b"), ["PS_SERVICE_NAME"] = "B", ["PS_PEER_KEY"] = PeerKey });
        using var forged = new HttpRequestMessage(HttpMethod.Post, "/bank/credit")
        {
            Content = new StringContent("""{"account":"x","amount":1}""", Encoding.UTF8, "application/json"),
        };
        forged.Headers.TryAddWithoutValidation("PS-Caller", "A");
        forged.Headers.TryAddWithoutValidation("PS-Session", "AAAAAAAAAAAAAAAAAAAAAA");
        forged.Headers.TryAddWithoutValidation("PS-Seq", "1");
        forged.Headers.TryAddWithoutValidation("PS-Signature", "t=" + DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() + ",v1=" + new string('0', 64));
        using var response = await b.Client.SendAsync(forged, TestContext.Current.CancellationToken);

        Assert.Equal(HttpStatusCode.Unauthorized, response.StatusCode);
        Assert.Contains("peer-signature", await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken), StringComparison.Ordinal);
        var (_, count, _) = await b.SendAsync(HttpMethod.Get, "/bank/credits/x", null, null);
        Assert.Equal(0, count.GetProperty("count").GetInt32());
        await Task.Delay(200, TestContext.Current.CancellationToken);
        Assert.Contains("Refused a call claiming to come from service 'A'", b.Output, StringComparison.Ordinal);
    }
}
