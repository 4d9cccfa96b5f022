using System.Net;
using System.Text;
using System.Text.Json;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.Options;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Log;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>
/// Issue 32, build 5 ("Secrets at rest"): with <c>PersistentServicesOptions.Log.Encryption.Key</c> set (bound from
/// configuration, as docs/operations.md shows: a Kubernetes Secret mounted as a file, or any configuration source), no
/// header value, query, body, reply, session state or shared value of a request appears in clear in any file of the log
/// directory; after a crash the service recovers the same state with the key, and refuses to start without it or with
/// another one.
/// </summary>
public sealed class EncryptedLogTests : IDisposable
{
    private static readonly string KeyA = Convert.ToBase64String([.. Enumerable.Range(0, 32).Select(i => (byte)(3 * i + 1))]);
    private static readonly string KeyB = Convert.ToBase64String([.. Enumerable.Range(0, 32).Select(i => (byte)(5 * i + 2))]);

    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private readonly TempDirectory _secrets = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose()
    {
        _dir.Dispose();
        _secrets.Dispose();
    }

    private static string[] Items(JsonElement body) => [.. body.GetProperty("items").EnumerateArray().Select(e => e.GetString()!)];

    private static Action<PersistentServicesOptions> BindFrom(IConfiguration configuration) =>
        o => configuration.GetSection("PersistentServices:Log:Encryption").Bind(o.Log.Encryption);

    /// <summary>A Kubernetes Secret mounted as a volume: one file per key, its name the configuration key ("__" for ":").</summary>
    private IConfiguration MountedSecret(string key)
    {
        File.WriteAllText(Path.Combine(_secrets.Path, "PersistentServices__Log__Encryption__Key"), key + "\n");
        return new ConfigurationBuilder().AddKeyPerFile(_secrets.Path, optional: false).Build();
    }

    private static IConfiguration InMemory(params (string Key, string? Value)[] values) =>
        new ConfigurationBuilder().AddInMemoryCollection(values.Select(v => new KeyValuePair<string, string?>(v.Key, v.Value))).Build();

    private string AllFiles() => string.Concat(Directory.GetFiles(_dir.Path, "*", SearchOption.AllDirectories).Select(f => Encoding.Latin1.GetString(File.ReadAllBytes(f))));

    [Fact]
    public async Task WithKey_NoHeaderQueryBodyReplyOrStateInClearInAnyFile_EveryRecordSealed_CrashRecoversTheSameState()
    {
        string[] secrets =
        [
            "header-secret-4f1a", "query-secret-77c2", "body-secret-item-1", "body-secret-item-2", "body-secret-item-3",
            "shared-value-secret-9d", "reply-header-secret-e3",
        ];
        string session;
        string lastReply;
        await using (var server = await TestServer.StartAsync(_dir.Path, BindFrom(MountedSecret(KeyA)), behavior: _behavior))
        {
            Assert.NotNull(server.Runtime.Log.EncryptionKeyId);
            session = await server.StartSessionAsync();
            for (var i = 1; i <= 3; i++)
            {
                using var request = TestServer.Request(HttpMethod.Post, "/cart/add?access_token=query-secret-77c2", session, i, new { item = $"body-secret-item-{i}" });
                request.Headers.TryAddWithoutValidation("X-Trace-Note", "header-secret-4f1a");
                using var response = await server.Client.SendAsync(request, Ct);
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                lastReply = await response.Content.ReadAsStringAsync(Ct);
            }

            var (shared, _) = await server.SendAsync(HttpMethod.Post, "/shared/add", session, 4, new { opId = "shared-value-secret-9d", amount = 5 });
            Assert.Equal(HttpStatusCode.OK, shared.StatusCode);

            // A reply large enough to be kept in the log rather than in memory (its header names the op id).
            var (page, _) = await server.SendAsync(HttpMethod.Post, "/page", session, 5, new { opId = "reply-header-secret-e3", size = 300_000 });
            Assert.Equal(HttpStatusCode.OK, page.StatusCode);
            lastReply = (await server.SendAsync(HttpMethod.Post, "/cart/add", session, 6, new { item = "after-page" })).Body.GetRawText();
            await server.CrashAsync();
        }

        var files = AllFiles();
        Assert.All(secrets, secret => Assert.DoesNotContain(secret, files, StringComparison.Ordinal));

        // Every committed record of every kind is sealed: none is in clear, whatever it holds.
        var encryption = new LogEncryptionOptions { Key = KeyA };
        var verification = LogVerifier.Verify(_dir.Path, encryption: encryption);
        Assert.False(verification.Refused);
        Assert.Equal(0, verification.Inventory.RecordsInClear);
        Assert.Equal(verification.Inventory.Records, verification.Inventory.ByLogKey.Values.Sum());
        Assert.True(verification.Inventory.Records > 10, $"only {verification.Inventory.Records} records");

        await using (var server = await TestServer.StartAsync(_dir.Path, BindFrom(MountedSecret(KeyA)), behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            var executions = _behavior.Count("cart/add:after-page");
            var (cart, cartBody) = await server.SendAsync(HttpMethod.Get, "/cart", session, null);
            Assert.Equal(HttpStatusCode.OK, cart.StatusCode);
            Assert.Equal(["body-secret-item-1", "body-secret-item-2", "body-secret-item-3", "after-page"], Items(cartBody));
            Assert.Equal(5, server.Shared(() => PersistentServices.AspNetCore.Tests.TestSupport.SharedTestController.Total.Read()));

            var (duplicate, duplicateBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 6, new { item = "after-page" });
            Assert.Equal("true", duplicate.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(lastReply, duplicateBody.GetRawText());
            Assert.Equal(executions, _behavior.Count("cart/add:after-page"));
        }
    }

    [Fact]
    public async Task EncryptedLog_WithoutTheKey_OrWithAnotherKey_RefusesToStart_NamingTheKeyId_ThenStartsWithTheKeyAndRotates()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, BindFrom(InMemory(("PersistentServices:Log:Encryption:Key", KeyA))), behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "kept" });
            await server.CrashAsync();
        }

        var idA = LogKey.Format(LogKey.IdOf(Convert.FromBase64String(KeyA)));
        var missing = await Assert.ThrowsAnyAsync<Exception>(() => TestServer.StartAsync(_dir.Path, behavior: _behavior));
        var error = Assert.IsType<LogEncryptionKeyException>(missing);
        Assert.Equal(idA, error.KeyId);
        Assert.Contains("PersistentServicesOptions.Log.Encryption", error.Message, StringComparison.Ordinal);

        var wrong = await Assert.ThrowsAnyAsync<Exception>(() => TestServer.StartAsync(_dir.Path, BindFrom(InMemory(("PersistentServices:Log:Encryption:Key", KeyB))), behavior: _behavior));
        Assert.Contains($"key id {idA}, which is not among the configured log keys", wrong.Message, StringComparison.Ordinal);

        // Rotation: the new key writes, the old one (a previous key) reads what it sealed.
        var rotated = InMemory(("PersistentServices:Log:Encryption:Key", KeyB), ("PersistentServices:Log:Encryption:PreviousKeys:0", KeyA));
        await using (var server = await TestServer.StartAsync(_dir.Path, BindFrom(rotated), behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(LogKey.Format(LogKey.IdOf(Convert.FromBase64String(KeyB))), server.Runtime.Log.EncryptionKeyId);
            var (_, body) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "after-rotation" });
            Assert.Equal(["kept", "after-rotation"], Items(body));
        }
    }

    [Theory]
    [InlineData("not-a-key", "PersistentServicesOptions.Log.Encryption.Key is not valid base64")]
    [InlineData("c2hvcnQ=", "PersistentServicesOptions.Log.Encryption.Key must be a 256-bit AES key")]
    public async Task BadKey_FailsOptionsValidation_NamingTheOption_NeverTheValue(string key, string expected)
    {
        var error = await Assert.ThrowsAsync<OptionsValidationException>(() => TestServer.StartAsync(_dir.Path, o => o.Log.Encryption.Key = key, behavior: _behavior));

        Assert.Contains(expected, error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain(key, error.Message, StringComparison.Ordinal);
        Assert.Empty(Directory.GetFiles(_dir.Path));
    }

    [Fact]
    public void WholeOptionsSection_BindsTheKeyAndPreviousKeys_AsTheSamplesBindTheirOptions()
    {
        var configuration = InMemory(
            ("PersistentServices:LogDirectory", "/var/lib/orders/log"),
            ("PersistentServices:Log:Encryption:Key", KeyB),
            ("PersistentServices:Log:Encryption:PreviousKeys:0", KeyA));
        var options = new PersistentServicesOptions();

        configuration.GetSection("PersistentServices").Bind(options);

        Assert.Equal(KeyB, options.Log.Encryption.Key);
        Assert.Equal([KeyA], options.Log.Encryption.PreviousKeys);
        Assert.Equal(KeyB, options.BuildLogOptions().Encryption.Key);
    }
}
