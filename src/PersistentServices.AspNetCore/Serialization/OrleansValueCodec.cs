using Microsoft.Extensions.DependencyInjection;
using Orleans;
using Orleans.Serialization;
using PersistentServices.Log.Records;

namespace PersistentServices.Serialization;

/// <summary>
/// User values through Orleans.Serialization, the design card's serializer: types with Orleans attributes
/// (<c>[GenerateSerializer]</c>, <c>[Id(n)]</c>) get its compact, version-tolerant binary form; every other type goes
/// through its System.Text.Json codec, so users annotate nothing (properties added or removed later still read, a
/// renamed or moved type does not: docs/upgrades.md). Built-in types (numbers, strings, collections) use Orleans'
/// own codecs.
/// </summary>
internal sealed class OrleansValueCodec : ValueCodec
{
    private readonly Serializer _serializer;

    public OrleansValueCodec()
    {
        var services = new ServiceCollection();
        services.AddSerializer(builder => builder.AddJsonSerializer(isSupported: static type => !type.IsDefined(typeof(GenerateSerializerAttribute), inherit: false)));
        _serializer = services.BuildServiceProvider().GetRequiredService<Serializer>();
    }

    public override ValueFormat Format => ValueFormat.Orleans;

    public override byte[] Serialize<T>(T value) => _serializer.SerializeToArray(value);

    protected override T DeserializeOwn<T>(ReadOnlySpan<byte> bytes) => _serializer.Deserialize<T>(bytes)!;
}
