using System.Collections.Concurrent;
using System.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;

namespace PersistentServices.AspNetCore.Tests.Domain;

/// <summary>
/// Domain messages are signed for the member they are sent to (issue 32, finding 3): a message captured on its way to one
/// member and sent as it is to another is refused there (401 domain-member, logged).
/// </summary>
public sealed class DomainMessageBindingTests : IDisposable
{
    private const string PeerKey = "domain-binding-test-key-0123456789abcdef";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task MessageCapturedOnItsWayToMemberB_SentToMemberC_Is401AndLogged()
    {
        // Member B, a stand-in that keeps what A sends it: A asks it for its recovered state numbers as soon as A has started.
        var captured = new ConcurrentQueue<(string Name, string Value)[]>();
        var memberBuilder = WebApplication.CreateBuilder();
        memberBuilder.WebHost.UseUrls("http://127.0.0.1:0");
        memberBuilder.Logging.ClearProviders();
        await using var b = memberBuilder.Build();
        b.MapGet(ServiceDomain.RecoveredPath, (HttpRequest request) =>
        {
            captured.Enqueue([.. request.Headers.Select(h => (h.Key, h.Value.ToString()))]);
            return Results.Json(Array.Empty<object>());
        });
        b.MapPost(ServiceDomain.RecoveredPath, () => Results.NoContent());
        await b.StartAsync(TestContext.Current.CancellationToken);
        var bAddress = new Uri(b.Urls.First());

        var cLog = new ListLoggerProvider();
        await using var c = await TestServer.StartAsync(Path.Combine(_dir.Path, "c"), o => Member(o, "C", bAddress, new Uri("http://127.0.0.1:1/")),
            build: builder => builder.Logging.AddProvider(cLog));
        await c.RecoveryCompletion;
        await using var a = await TestServer.StartAsync(Path.Combine(_dir.Path, "a"), o => Member(o, "A", bAddress, c.Client.BaseAddress!));
        await a.RecoveryCompletion;

        var deadline = DateTime.UtcNow.AddSeconds(10);
        (string Name, string Value)[]? message;
        while ((message = captured.FirstOrDefault(m => m.Any(h => h.Name == "PS-Caller" && h.Value == "A"))) is null)
        {
            Assert.True(DateTime.UtcNow < deadline, "A never asked B for its recovered state numbers");
            await Task.Delay(20, TestContext.Current.CancellationToken);
        }

        using var replayed = new HttpRequestMessage(HttpMethod.Get, ServiceDomain.RecoveredPath);
        foreach (var (name, value) in message.Where(h => h.Name.StartsWith("PS-", StringComparison.OrdinalIgnoreCase)))
        {
            replayed.Headers.TryAddWithoutValidation(name, value);
        }

        using var response = await c.Client.SendAsync(replayed, TestContext.Current.CancellationToken);

        var text = await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
        Assert.True(response.StatusCode == HttpStatusCode.Unauthorized, $"C answered {(int)response.StatusCode}: {text}");
        var problem = System.Text.Json.JsonDocument.Parse(text).RootElement;
        Assert.Equal("urn:persistentservices:problem:domain-member", problem.GetProperty("type").GetString());
        Assert.Contains("signed for service 'B', not for this one", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.Contains(cLog.Messages(1109), m => m.Contains("signed for service 'B'", StringComparison.Ordinal));
    }

    private static void Member(PersistentServicesOptions options, string name, Uri b, Uri c)
    {
        options.ServiceName = name;
        options.Calls.PeerKey = PeerKey;
        options.Domain.Members["A"] = new Uri("http://127.0.0.1:1/");
        options.Domain.Members["B"] = b;
        options.Domain.Members["C"] = c;
    }
}
