using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.Options;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Calls;

/// <summary>The peer keys and signature options are validated at startup, with messages that name the option.</summary>
public sealed class PersistentCallOptionsTests : IDisposable
{
    private const string Key = "persistent-call-options-key-0123456789ab";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task AcceptedPeerKeyTooShort_TheServiceDoesNotStart_NamingIt()
    {
        var error = await Assert.ThrowsAsync<OptionsValidationException>(() => TestServer.StartAsync(_dir.Path, o =>
        {
            o.Calls.PeerKey = Key;
            o.Calls.AcceptedPeerKeys.Add(Key + "-next");
            o.Calls.AcceptedPeerKeys.Add("short");
        }));

        Assert.Contains("PersistentServicesOptions.Calls.AcceptedPeerKeys[1] must have at least 32 characters (had 5)", error.Message, StringComparison.Ordinal);
        Assert.DoesNotContain("AcceptedPeerKeys[0]", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("accepted-without-peer-key", "AcceptedPeerKeys needs PeerKey")]
    [InlineData("skew-negative", "SignatureFutureSkew must be between 0 and 1 minute")]
    [InlineData("skew-large", "SignatureFutureSkew must be between 0 and 1 minute")]
    [InlineData("legacy-undefined", "LegacySignatures must be Refuse, Accept or SignAndAccept")]
    public void Invalid_IsRefused_NamingTheOption(string which, string message)
    {
        var options = new PersistentServicesOptions { LogDirectory = _dir.Path, ServiceName = "A" };
        options.Calls.PeerKey = Key;
        switch (which)
        {
            case "accepted-without-peer-key":
                options.Calls.PeerKey = null;
                options.Calls.AcceptedPeerKeys.Add(Key);
                break;
            case "skew-negative":
                options.Calls.SignatureFutureSkew = TimeSpan.FromSeconds(-1);
                break;
            case "skew-large":
                options.Calls.SignatureFutureSkew = TimeSpan.FromMinutes(2);
                break;
            default:
                options.Calls.LegacySignatures = (LegacySignatures)7;
                break;
        }

        var result = new PersistentServicesOptionsValidator().Validate(null, options);

        Assert.True(result.Failed);
        Assert.Contains(result.Failures!, f => f.Contains(message, StringComparison.Ordinal));
    }

    [Fact]
    public void Defaults_AreValid_AndStrict()
    {
        var options = new PersistentServicesOptions { LogDirectory = _dir.Path, ServiceName = "A" };
        options.Calls.PeerKey = Key;

        var result = new PersistentServicesOptionsValidator().Validate(null, options);
        Assert.True(result.Succeeded, string.Join("\n", result.Failures ?? []));
        Assert.Equal(TimeSpan.FromSeconds(5), options.Calls.SignatureFutureSkew);
        Assert.Equal(TimeSpan.FromMinutes(5), options.Calls.SignatureWindow);
        Assert.Equal(LegacySignatures.Refuse, options.Calls.LegacySignatures);
        Assert.Empty(options.Calls.AcceptedPeerKeys);
    }

    /// <summary>How a deployment sets them: configuration, e.g. environment variables from a Kubernetes Secret (docs/operations.md).</summary>
    [Fact]
    public void FromConfiguration_TheKeysAndTheSettingsBind()
    {
        var configuration = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["PersistentServices:Calls:PeerKey"] = Key,
            ["PersistentServices:Calls:AcceptedPeerKeys:0"] = Key + "-old",
            ["PersistentServices:Calls:SignatureFutureSkew"] = "00:00:02",
            ["PersistentServices:Calls:LegacySignatures"] = "Accept",
        }).Build();
        var options = new PersistentServicesOptions();

        configuration.GetSection("PersistentServices").Bind(options);

        Assert.Equal([Key + "-old"], options.Calls.AcceptedPeerKeys);
        Assert.Equal(TimeSpan.FromSeconds(2), options.Calls.SignatureFutureSkew);
        Assert.Equal(LegacySignatures.Accept, options.Calls.LegacySignatures);
    }
}
