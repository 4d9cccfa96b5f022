using System.Net;
using System.Text;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>
/// Issue 32, finding 6: every request header except Authorization, Proxy-Authorization and Cookie was written to the log in
/// clear, API keys and tokens too. The usual API-key and token headers are excluded by default now; an application adds
/// its own. What the log holds: docs/operations.md.
/// </summary>
public sealed class LoggedHeadersTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task ApiKeyAndTokenHeaders_AreNotLogged_ByDefault_NorAreTheApplicationsOwn_OthersAre()
    {
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.ExcludedRequestHeaders.Add("X-Tenant-Secret")))
        {
            var session = await server.StartSessionAsync();
            using var request = TestServer.Request(HttpMethod.Post, "/counter/add", session, 1, new { opId = "h", amount = 1 });
            request.Headers.TryAddWithoutValidation("X-Api-Key", "api-key-value-7c1d");
            request.Headers.TryAddWithoutValidation("X-Auth-Token", "auth-token-value-52af");
            request.Headers.TryAddWithoutValidation("Ocp-Apim-Subscription-Key", "subscription-value-9e03");
            request.Headers.TryAddWithoutValidation("X-Tenant-Secret", "tenant-secret-value-18bb");
            request.Headers.TryAddWithoutValidation("X-Trace-Note", "plain-note-value-4d2c");
            using var response = await server.Client.SendAsync(request, Ct);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            await server.CrashAsync(); // everything committed is in the files
        }

        var text = string.Concat(Directory.GetFiles(_dir.Path).Select(f => Encoding.Latin1.GetString(File.ReadAllBytes(f))));
        Assert.DoesNotContain("api-key-value-7c1d", text, StringComparison.Ordinal);
        Assert.DoesNotContain("auth-token-value-52af", text, StringComparison.Ordinal);
        Assert.DoesNotContain("subscription-value-9e03", text, StringComparison.Ordinal);
        Assert.DoesNotContain("tenant-secret-value-18bb", text, StringComparison.Ordinal);
        Assert.Contains("plain-note-value-4d2c", text, StringComparison.Ordinal);
    }
}
